"""One backend's limiter: inflight count, latency window, backend signals, and the control tick.

The limit algorithm (gateway.limits) decides; the limiter measures and applies. It owns the injected
clock, the count of requests in flight, the highest count since the previous tick (did the limit
bind?), the window of finished-request samples (restarted on every limit change, so the algorithm
only judges the current limit), the latest scrape of the backend, and the KV-derived ceiling.

KV ceiling. Seed 000's arithmetic bounds useful concurrency by KV capacity / tokens per request
(168,832 / 8,192 = 20; a CPU engine with 8,192 KV tokens and 232 + 300 token requests: 15.4). That
assumes every request holds its full prompt + output at once and that nothing is shared. Neither
holds in steady state: requests are at different points of their output (on average a request
holds prompt + half its output), and vLLM's prefix cache shares the blocks of identical prompt
prefixes. So, once the backend has been seen running requests, the ceiling is
    KV capacity / measured footprint,  footprint = kv_usage x capacity / running  (smoothed),
which is exactly how many sequences of the current mix fit (at saturation it equals `running`).
Before that, the arithmetic with the smoothed observed prompt + output tokens is the cold-start
bound. The ceiling is min(max_limit, KV ceiling), never below the floor; without KV information it
is max_limit. The latency controller and the preemption rule find the knee below it.

What the algorithm is shown: P90 and P50 over the newest `control_samples` (32) samples of the
current epoch, so a step change in the backend shows within a few seconds instead of waiting for a
30-second window to turn over (on the simulated engine with a TPOT target, recovery after capacity
came back went from 1,497 to 1,644 tok/s); `state()` and `p90()` report the whole window.
Streams still in flight add what they already show: the age of those overdue for their first
token (TTFT) and, after a few events, their pace so far (TPOT). A finished request's TPOT arrives
seconds after a slowdown began; the pace of the streams it slowed shows it at the next tick.

Hot path: `acquire` and `Slot.release` do constant work (no sorting, one small object per acquire).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from gateway.limits.base import LimitAlgorithm, clamp
from gateway.types import (
    SIGNALS,
    BackendSignals,
    Clock,
    Decision,
    Direction,
    Observation,
    Sample,
    Signal,
    StreamProgress,
)
from gateway.window import SampleWindow, SlidingMin, nearest_rank

TOKENS_SMOOTHING = 0.05
"""EWMA weight of one finished request in the tokens-per-request estimate (about 20 requests)."""
FOOTPRINT_SMOOTHING = 0.2
"""EWMA weight of one scrape in the measured KV footprint per running sequence."""
PARTIAL_MIN_EVENTS = 8
"""Output events an in-flight stream needs before its pace so far counts as a TPOT value."""
MIN_RTT_HORIZON = 300.0
"""Seconds over which the lowest e2e-per-token latency is remembered (no-load estimate)."""


class Slot:
    """One admitted request's hold on a backend. Release exactly once."""

    __slots__ = ("_limiter", "_released", "_ttft_recorded")

    def __init__(self, limiter: Limiter) -> None:
        self._limiter = limiter
        self._released = False
        self._ttft_recorded = False

    def streaming(self, dispatched_at: float, progress: StreamProgress) -> None:
        """A streaming request was sent: the limiter watches `progress` until the slot is released.

        Until the first token, the request's age bounds its TTFT from below; after a few tokens, the
        pace so far estimates its TPOT. Both count at the control tick, before the request ends.
        """
        if not self._released:
            self._limiter._streams[self] = (dispatched_at, progress)

    def first_token(self, dispatched_at: float, ttft: float) -> None:
        """The request's first token arrived: its TTFT counts now, not when the request ends."""
        if not self._released and not self._ttft_recorded:
            self._ttft_recorded = True
            self._limiter._window.add_first_token(dispatched_at, ttft)

    @property
    def released(self) -> bool:
        return self._released

    def release(self, sample: Sample | None = None) -> None:
        """Give the slot back; record `sample` if the request finished well. Twice is a bug."""
        if self._released:
            raise RuntimeError("slot released twice")
        self._released = True
        counted = self._limiter._stream_done(self)
        if sample is not None:
            self._limiter._delivered += max(0, sample.output_tokens - counted)
        if self._ttft_recorded and sample is not None and sample.ttft is not None:
            sample = replace(sample, ttft=None)
        self._limiter._release(sample)


class Limiter:
    def __init__(
        self,
        algorithm: LimitAlgorithm,
        *,
        clock: Clock,
        floor: int = 1,
        max_limit: int = 256,
        window_seconds: float = 30.0,
        window_max_samples: int = 1000,
        min_samples: int = 8,
        on_capacity: Callable[[], None] | None = None,
        control_samples: int | None = 32,
        overdue_after: float | None = None,
    ) -> None:
        if floor < 1:
            raise ValueError(f"floor must be >= 1, got {floor}")
        if max_limit < floor:
            raise ValueError(f"max_limit ({max_limit}) must be >= floor ({floor})")
        if min_samples < 0:
            raise ValueError(f"min_samples must be >= 0, got {min_samples}")
        self.algorithm = algorithm
        self._clock = clock
        self._floor = floor
        self._max_limit = max_limit
        self._min_samples = min_samples
        self._control_samples = control_samples
        self._overdue_after = overdue_after
        self._on_capacity = on_capacity
        self._window = SampleWindow(clock, max_age=window_seconds, max_samples=window_max_samples)
        self._streams: dict[Slot, tuple[float, StreamProgress]] = {}
        """Streaming requests of this backend in flight: dispatch time and progress."""
        self._counted: dict[Slot, int] = {}
        """Output events of each stream in flight already counted as delivered tokens."""
        self._delivered = 0
        """Output tokens delivered since the previous tick."""
        self._min_per_token = SlidingMin(MIN_RTT_HORIZON)

        self._inflight = 0
        self._peak = 0
        self._completed = 0
        self._ceiling = max_limit
        self._limit = clamp(algorithm.initial_limit(floor, max_limit), floor, max_limit)
        self._effective = self._limit
        self._last_decision: Decision | None = None
        self._last_change_at = clock()
        self._last_tick_at = self._last_change_at
        self._window.start_epoch(self._last_change_at)

        self._signals: BackendSignals | None = None
        self._preemptions_seen: float | None = None
        self._preemptions_pending = 0.0
        self._kv_capacity: int | None = None
        self._tokens_per_request: float | None = None
        self._kv_per_running: float | None = None

    # -- properties ---------------------------------------------------------------------------

    @property
    def limit(self) -> int:
        """The limit in force: the algorithm's, lowered at once if a scrape lowered the ceiling."""
        return self._effective

    @property
    def inflight(self) -> int:
        return self._inflight

    @property
    def ceiling(self) -> int:
        return self._ceiling

    @property
    def floor(self) -> int:
        return self._floor

    @property
    def last_decision(self) -> Decision | None:
        return self._last_decision

    @property
    def last_change_at(self) -> float:
        return self._last_change_at

    @property
    def signals(self) -> BackendSignals | None:
        return self._signals

    @property
    def tokens_per_request(self) -> float | None:
        return self._tokens_per_request

    @property
    def kv_per_running(self) -> float | None:
        return self._kv_per_running

    # -- hot path -----------------------------------------------------------------------------

    def has_room(self) -> bool:
        return self._inflight < self._effective

    def acquire(self) -> Slot:
        if self._inflight >= self._effective:
            raise RuntimeError(f"no room: {self._inflight} in flight, limit {self._effective}")
        self._inflight += 1
        if self._inflight > self._peak:
            self._peak = self._inflight
        return Slot(self)

    def _release(self, sample: Sample | None) -> None:
        self._inflight -= 1
        self._completed += 1
        if sample is not None and sample.ok:
            self._record(sample)
        if self._on_capacity is not None and self._inflight < self._effective:
            self._on_capacity()

    def _record(self, sample: Sample) -> None:
        self._window.add(sample)
        tokens = sample.prompt_tokens + sample.output_tokens
        if tokens > 0:
            prev = self._tokens_per_request
            self._tokens_per_request = (
                float(tokens) if prev is None else prev + TOKENS_SMOOTHING * (tokens - prev)
            )
        if sample.output_tokens > 0:
            self._min_per_token.add(sample.dispatched_at + sample.e2e, sample.e2e / sample.output_tokens)

    # -- scrape loop --------------------------------------------------------------------------

    def observe(self, signals: BackendSignals) -> None:
        """Take one scrape of the backend's /metrics."""
        self._signals = signals
        total = signals.preemptions_total
        if total is not None:
            seen = self._preemptions_seen
            if seen is not None:
                # A counter that went down means the backend restarted and counts from zero.
                self._preemptions_pending += total - seen if total >= seen else total
            self._preemptions_seen = total
        if signals.kv_capacity_tokens is not None and signals.kv_capacity_tokens > 0:
            self._kv_capacity = signals.kv_capacity_tokens
        running = signals.running
        if (
            self._kv_capacity is not None
            and signals.kv_usage is not None
            and signals.kv_usage > 0
            and running is not None
            and running >= 1
        ):
            footprint = signals.kv_usage * self._kv_capacity / running
            prev = self._kv_per_running
            self._kv_per_running = (
                footprint if prev is None else prev + FOOTPRINT_SMOOTHING * (footprint - prev)
            )
        self._refresh_ceiling()

    def kv_ceiling(self) -> int | None:
        """Concurrency the KV cache can hold at the observed request footprint, if known."""
        if self._kv_capacity is None:
            return None
        footprint = self._kv_per_running or self._tokens_per_request
        if footprint is None or footprint <= 0:
            return None
        return math.floor(self._kv_capacity / footprint)

    def _refresh_ceiling(self) -> None:
        ceiling = self._max_limit
        if self.algorithm.respects_kv_ceiling:
            kv = self.kv_ceiling()
            if kv is not None:
                ceiling = max(self._floor, min(ceiling, kv))
        self._ceiling = ceiling
        before = self._effective
        self._effective = min(self._limit, ceiling)
        if self._effective > before and self._on_capacity is not None:
            self._on_capacity()

    # -- control tick -------------------------------------------------------------------------

    def _percentiles(self, live: dict[Signal, list[float]], newest: int | None = None) -> _Percentiles:
        """P90 and P50 per signal over the current epoch, and how many values stand behind each.

        `live` holds values from this epoch's streams still in flight (see `_live`), added to the
        finished samples. A signal with no values at all (TTFT and TPOT for non-streaming traffic)
        is taken from the backend's own histogram window, if that scrape came after the last
        change; it counts as `min_samples` values.
        Counts are per signal because the signals arrive at different times: a streaming request
        gives its TTFT at the first token and its TPOT only when it ends, seconds later.
        """
        p90: dict[Signal, float] = {}
        p50: dict[Signal, float] = {}
        counts: dict[Signal, int] = {}
        measured: dict[Signal, list[float]] = {}
        for signal in SIGNALS:
            values = self._window.values(signal, newest)
            extra = live.get(signal)
            if extra:
                values = sorted(values + extra)
            if values:
                p90[signal] = _rank(values, 0.9)
                p50[signal] = _rank(values, 0.5)
                counts[signal] = len(values)
                measured[signal] = values
        sig = self._signals
        if sig is not None and sig.at >= self._last_change_at:
            for signal in SIGNALS:
                backend = sig.p90(signal)
                if signal not in p90 and backend is not None:
                    p90[signal] = backend
                    counts[signal] = self._min_samples
        return _Percentiles(p90, p50, counts, measured)

    def _live(self) -> dict[Signal, list[float]]:
        """What this epoch's streams in flight already tell, before they finish.

        TTFT: a stream that has waited longer than `overdue_after` (the TTFT target) for its first
        token has already missed it; its age counts as a TTFT value, a lower bound, so a backend
        that stops producing first tokens is seen before any of them arrives.
        TPOT: a stream with `PARTIAL_MIN_EVENTS` events counts its pace so far, the larger of the
        mean gap between its events and the mean had the next event come now (a stream that
        stalls shows it). A request's TPOT is only final when it ends, seconds after a slowdown
        began; its pace shows the slowdown within a second.
        """
        if not self._streams:
            return {}
        now = self._clock()
        start, bound = self._last_change_at, self._overdue_after
        overdue: list[float] = []
        pace: list[float] = []
        for dispatched_at, progress in self._streams.values():
            if dispatched_at < start:
                continue
            first = progress.first_at
            if first is None:
                if bound is not None and now - dispatched_at > bound:
                    overdue.append(now - dispatched_at)
                continue
            events, last = progress.events, progress.last_at
            if events >= PARTIAL_MIN_EVENTS and last is not None:
                pace.append(max((last - first) / (events - 1), (now - first) / events))
        live: dict[Signal, list[float]] = {}
        if overdue:
            live["ttft"] = overdue
        if pace:
            live["tpot"] = pace
        return live

    def _stream_done(self, slot: Slot) -> int:
        """Stop watching a stream; the output events of it already counted as delivered."""
        self._streams.pop(slot, None)
        return self._counted.pop(slot, 0)

    def _stream_tokens(self) -> int:
        """Output events streams in flight showed since the previous tick, and count them."""
        total = 0
        for slot, (_, progress) in self._streams.items():
            events = progress.events
            total += events - self._counted.get(slot, 0)
            self._counted[slot] = events
        return total

    def p90(self) -> dict[Signal, float]:
        return self._percentiles(self._live()).p90

    def tick(self, queued: int) -> Decision:
        """Run the algorithm once and apply its limit. Called by the control loop."""
        now = self._clock()
        self._refresh_ceiling()
        live = self._live()
        p90, p50, counts, values = self._percentiles(live, self._control_samples)
        per_token = self._window.per_token_values(self._control_samples)
        obs = Observation(
            now=now,
            limit=self._limit,
            ceiling=self._ceiling,
            floor=self._floor,
            inflight=self._inflight,
            peak_inflight=self._peak,
            queued=queued,
            p90=p90,
            p50=p50,
            sample_count=len(self._window) + sum(map(len, live.values())),
            min_e2e_per_token=self._min_per_token.value(now),
            signals=self._signals,
            preemptions_delta=self._preemptions_pending,
            since_change=now - self._last_change_at,
            min_samples=self._min_samples,
            p90_e2e_per_token=nearest_rank(per_token, 0.9),
            p50_e2e_per_token=nearest_rank(per_token, 0.5),
            completed=self._completed,
            counts=counts,
            values=values,
            delivered_tokens=float(self._delivered + self._stream_tokens()),
            interval=now - self._last_tick_at,
        )
        self._delivered = 0
        self._last_tick_at = now
        decision = self.algorithm.update(obs)
        new = clamp(decision.limit, self._floor, self._ceiling)
        if new != decision.limit:
            decision = replace(decision, limit=new, direction=_direction(self._limit, new))
        self._preemptions_pending = 0.0
        self._completed = 0
        self._peak = self._inflight
        before = self._effective
        if new != self._limit:
            self._limit = new
            self._last_change_at = now
            self._window.start_epoch(now)
        self._effective = self._limit
        self._last_decision = decision
        if self._effective > before and self._on_capacity is not None:
            self._on_capacity()
        return decision

    # -- introspection ------------------------------------------------------------------------

    def state(self) -> dict[str, object]:
        """A JSON-ready account of this backend's limiter for /admin/state."""
        p90, p50, _, _ = self._percentiles(self._live())
        sig = self._signals
        d = self._last_decision
        return {
            "algorithm": self.algorithm.name,
            "limit": self._effective,
            "ceiling": self._ceiling,
            "kv_ceiling": self.kv_ceiling(),
            "floor": self._floor,
            "inflight": self._inflight,
            "p90": {s: round(v, 6) for s, v in p90.items()},
            "p50": {s: round(v, 6) for s, v in p50.items()},
            "samples": len(self._window),
            "kv_usage": sig.kv_usage if sig is not None else None,
            "waiting": sig.waiting if sig is not None else None,
            "preemptions_total": sig.preemptions_total if sig is not None else None,
            "kv_capacity_tokens": self._kv_capacity,
            "running": sig.running if sig is not None else None,
            "tokens_per_request": _rounded(self._tokens_per_request),
            "kv_tokens_per_running": _rounded(self._kv_per_running),
            "last_change_at": self._last_change_at,
            "sla_infeasible": d is not None and d.sla_infeasible,
            "latency_floor": None
            if d is None or d.latency_floor is None
            else {s: round(v, 6) for s, v in d.latency_floor.items()},
            "last_decision": None
            if d is None
            else {"direction": d.direction.value, "reason": d.reason, "detail": d.detail},
        }


class _Percentiles(NamedTuple):
    p90: dict[Signal, float]
    p50: dict[Signal, float]
    counts: dict[Signal, int]
    values: dict[Signal, list[float]]


def _direction(old: int, new: int) -> Direction:
    if new > old:
        return Direction.UP
    if new < old:
        return Direction.DOWN
    return Direction.HOLD


def _rank(sorted_values: list[float], q: float) -> float:
    value = nearest_rank(sorted_values, q)
    assert value is not None  # called with at least one value
    return value


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
