"""One backend's limiter: the control tick that shows the algorithm what happened and applies its limit.

The limit algorithm (gateway.control.algorithms) decides; the limiter measures and applies. Its parts, each in
its own module: the count of requests in flight and their slots (`slots`), what those requests
showed (`evidence`), the KV ceiling (`ceiling`) and the engine's preemption counter (`counters`).
The limiter wires them: slots report to it, it forwards to the evidence and the ceiling.

    ceiling   = max_limit, or the KV ceiling when lower (for algorithms that respect it), or the
                requests the engine took when it last refused one as busy (`engine_busy`), >= floor
    limit     = clamp(algorithm's limit, floor, ceiling), applied at each tick
    in force  = min(limit, ceiling) or a burst's room (gateway.control.room), lowered at once when
                a scrape lowers the ceiling

Rules:
- The algorithm sees P90s over the newest `control_samples` values of the current epoch, so a step
  change shows within a few seconds instead of when the whole window has turned over; `state()`
  and `p90()` report the whole window.
- When the limit changes a new epoch starts: the evidence of the old limit no longer counts.
- So it does when a burst fills the limit after a quiet spell (gateway.control.room): what those
  requests show bounds the limit's latency from above, evidence for a raise only
  (gateway.control.bounds). The epoch starts before the tick that sees the limit full reads the
  evidence, because short prompts' first tokens come before that tick: a fresh gateway read its
  first batch's at 2.6x a TTFT target that the steady load met, and cut from 8 to 4.
- A burst after a quiet spell is taken in at once where the engine has room for it (the room in
  gateway.control.room); a fixed limit gets none, it is obeyed as configured.
- A decision outside [floor, ceiling] is clamped and its direction restated against the old limit,
  so what is reported is what was applied.
- The limiter tells no one of a rise: whoever calls `tick`, `adopt` or `observe` hands the room to
  the waiting requests after it (gateway.runtime.loops, gateway.pool.monitor).
- With shared state (several processes, one backend) one limiter, the leader's, ticks: it is also
  given the other processes' finished requests (`record`) and the shared in-flight count at the
  tick; the others `adopt` the limit it publishes and tick no algorithm of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gateway.control.algorithms.base import LimitAlgorithm, binds, clamp, direction
from gateway.control.busy import BusyCeiling
from gateway.control.ceiling import KVCeiling
from gateway.control.counters import CounterDelta
from gateway.control.evidence import Evidence
from gateway.control.room import BurstRoom
from gateway.control.slots import InFlight, Slot
from gateway.control.window import nearest_rank
from gateway.types import (
    SLA,
    Clock,
    Decision,
    EngineStats,
    Observation,
    Sample,
    Signal,
    StreamProgress,
)


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
        control_samples: int | None = 32,
        sla: SLA | None = None,
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
        self._evidence = Evidence(
            clock,
            window_seconds=window_seconds,
            window_max_samples=window_max_samples,
            min_samples=min_samples,
            sla=sla,
        )
        self._kv = KVCeiling()
        self._preemptions = CounterDelta()
        self._engine_stats: EngineStats | None = None
        self.on_sample: Callable[[Sample], None] | None = None
        """Told of each request that finished well here (shared state sends them to the leader)."""

        self._busy = BusyCeiling(window_seconds)
        self._ceiling = max_limit
        self._limit = clamp(algorithm.initial_limit(floor, max_limit), floor, max_limit)
        self._inflight = InFlight(self._limit, self)
        self._last_decision: Decision | None = None
        self.engine_p90: dict[Signal, float] = {}
        """The newest P90 of each signal measured (engine-side, from dispatch): the algorithm's at
        each tick, and an epoch's own as it ends, so it stands until the next epoch measures (the
        requests that start one are often all in flight, none measured): what admission allows
        the engine to add to a request's wait (gateway.admission.budget)."""
        self._last_change_at = clock()
        self._last_tick_at = self._last_change_at
        self._room = BurstRoom(self._last_change_at)
        self._epoch_at = self._last_change_at
        self._start_epoch(self._last_change_at)

    def reconfigure(self, algorithm: LimitAlgorithm, *, floor: int, max_limit: int, sla: SLA) -> None:
        """A reloaded config: new bounds and algorithm, keeping the limit learned so far (clamped)."""
        if not 1 <= floor <= max_limit:
            raise ValueError(f"need 1 <= floor ({floor}) <= max_limit ({max_limit})")
        self.algorithm = algorithm
        self._evidence.sla = sla
        self._floor = floor
        self._max_limit = max_limit
        self._limit = clamp(self._limit, floor, max_limit)
        self._refresh_ceiling()

    @property
    def sla(self) -> SLA:
        """The engine-side targets the limit is controlled to."""
        return self._evidence.sla

    @property
    def limit(self) -> int:
        """The limit in force: the algorithm's, lowered at once if a scrape lowered the ceiling."""
        return self._inflight.limit

    @property
    def controlled(self) -> int:
        """The algorithm's limit under the ceiling: the limit in force less any room a burst after a
        quiet spell has (gateway.control.room)."""
        return min(self._limit, self._ceiling)

    @property
    def inflight(self) -> int:
        return self._inflight.count

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

    # -- hot path -----------------------------------------------------------------------------

    def has_room(self) -> bool:
        return self._inflight.has_room()

    def acquire(self, sequences: int = 1) -> Slot:
        """Admit one request of `sequences` sequences; raises if there is no room (ask `has_room`)."""
        return self._inflight.acquire(sequences)

    # -- what slots report (slots.SlotEvents) -------------------------------------------------

    def sent(
        self, slot: Slot, dispatched_at: float, progress: StreamProgress | None, most_tokens: int | None
    ) -> None:
        self._evidence.watch(slot, dispatched_at, progress)
        if most_tokens is not None and self._kv.tokens_per_request is None:
            # What requests say they hold stands in until an answer says (gateway.control.ceiling).
            self._kv.declared(most_tokens)
            self._inflight.set_limit(self._in_force())

    def first_token(self, dispatched_at: float, ttft: float) -> None:
        self._evidence.first_token(dispatched_at, ttft)

    def finished(self, slot: Slot, sample: Sample | None) -> None:
        self._evidence.finish(slot, sample)
        if sample is not None and sample.ok:
            self._kv.add_request(sample.prompt_tokens, sample.output_tokens)
            if self.on_sample is not None:
                self.on_sample(sample)

    # -- shared state: another process's evidence, the leader's limit ------------------------------

    def record(self, sample: Sample) -> None:
        """A request another process finished on this backend: evidence like one of ours."""
        self._evidence.finish(object(), sample)
        if sample.ok:
            self._kv.add_request(sample.prompt_tokens, sample.output_tokens)

    def adopt(self, limit: int) -> None:
        """Take the limit the backend's leader decided (clamped to this process's bounds)."""
        new = clamp(limit, self._floor, self._max_limit)
        if new != self._limit:
            self._limit = new
            self._last_change_at = self._clock()
            self._start_epoch(self._last_change_at)
        self._inflight.set_limit(self._in_force())

    # -- scrape loop --------------------------------------------------------------------------

    def observe(self, stats: EngineStats) -> None:
        """Take one scrape of the backend's /metrics."""
        self._engine_stats = stats
        self._preemptions.observe(stats.preemptions_total)
        self._kv.observe(stats)
        self._refresh_ceiling()

    def kv_ceiling(self) -> int | None:
        """Concurrency the KV cache can hold at the observed request footprint, if known."""
        return self._kv.kv_ceiling()

    def whole_request_ceiling(self) -> int | None:
        """Concurrency the KV cache holds with every request at its full size, if known."""
        return self._kv.whole_request_ceiling()

    def _in_force(self) -> int:
        """The limit in force: the algorithm's under the ceiling, with a burst's room after a quiet
        spell (gateway.control.room), none for a fixed limit."""
        whole = None if self._fixed() else self._kv.burst_ceiling()
        return self._room.in_force(self.controlled, whole, self._ceiling)

    def _fixed(self) -> bool:
        """A fixed limit is obeyed as configured: no burst room."""
        return self.algorithm.name == "fixed"

    def engine_busy(self) -> None:
        """The engine refused one of the requests in flight as busy: the others are what it takes,
        a ceiling lowered at once (gateway.control.busy), for `window_seconds`."""
        self._busy.refused(self.inflight, self._floor, self._clock())
        self._refresh_ceiling()

    def _refresh_ceiling(self) -> None:
        if self.algorithm.respects_kv_ceiling:
            self._ceiling = self._kv.bound(self._floor, self._max_limit)
        else:
            self._ceiling = self._max_limit
        busy = self._busy.bound(self._clock())
        if busy is not None:
            self._ceiling = max(self._floor, min(self._ceiling, busy))
        self._inflight.set_limit(self._in_force())

    # -- control tick -------------------------------------------------------------------------

    def p90(self) -> dict[Signal, float]:
        return self._evidence.percentiles(self._evidence.live(), None, self._engine_stats).p90

    def tick(self, queued: int, *, shared_inflight: int | None = None) -> Decision:
        """Run the algorithm once and apply its limit. Called by the control loop.

        `shared_inflight`: the backend's in-flight count across every process, when slots are
        shared; it stands for this process's count in the peak and in the engine gap."""
        now = self._clock()
        inflight = self.inflight if shared_inflight is None else shared_inflight
        self._refresh_ceiling()
        peak, interval = max(self._inflight.peak, inflight), now - self._last_tick_at
        binding = binds(peak, self._limit, queued)
        if self._room.tick(now, binding):
            self._start_epoch(now, burst=True)  # filled by a burst: what it shows is the burst's
        obs = self._observe(now, queued, inflight, peak, interval)
        self.engine_p90.update(obs.p90)
        self._last_tick_at = now
        decision = self.algorithm.update(obs)
        new = clamp(decision.limit, self._floor, self._ceiling)
        if new != decision.limit:
            decision = replace(decision, limit=new, direction=direction(self._limit, new))
        self._inflight.reset_peak()
        if new != self._limit:
            self._limit = new
            self._last_change_at = now
            self._start_epoch(now)
        self._inflight.set_limit(self._in_force())
        self._last_decision = decision
        return decision

    def _observe(self, now: float, queued: int, inflight: int, peak: int, interval: float) -> Observation:
        """What the algorithm is told at this tick; takes the tokens and finished requests counted
        since the previous one."""
        evidence = self._evidence
        live = evidence.live()
        p90, p50, counts, values = evidence.percentiles(live, self._control_samples, self._engine_stats)
        lumped, finished = evidence.take_lumped()
        received = evidence.take_delivered()
        answered, missed = evidence.take_answered()
        generated = self._generated(now, peak, interval)
        return Observation(
            now=now,
            limit=self._limit,
            ceiling=self._ceiling,
            floor=self._floor,
            peak_inflight=peak,
            queued=queued,
            p90=p90,
            p50=p50,
            sample_count=len(evidence) + sum(map(len, live.values())),
            engine_stats=self._engine_stats,
            preemptions_delta=self._preemptions.take(),
            since_change=now - self._epoch_at,
            min_samples=self._min_samples,
            p90_e2e_per_token=nearest_rank(evidence.per_token_values(self._control_samples), 0.9),
            counts=counts,
            values=values,
            cohorts=evidence.cohorts(),
            bounds=evidence.bounds(),
            delivered_tokens=float(received) if generated is None else generated,
            lumped_tokens=float(lumped) if generated is None else 0.0,
            finished=finished,
            answered_tokens=answered,
            missed_tokens=missed,
            outside_engine=None if self._engine_stats is None else self._engine_stats.outside(inflight),
            interval=interval,
            kv_fits=self._kv.kv_ceiling(),
            kv_fits_whole=self._kv.whole_request_ceiling(),
        )

    def _generated(self, now: float, inflight: int, seconds: float) -> float | None:
        """The backend's own count of its output over `seconds` (`EngineStats.generated`), if its
        last scrape is fresh: unlike the tokens the clients received, it has no whole answers'
        lumps, so no count noise."""
        stats = self._engine_stats
        if stats is None or not stats.fresh(now, seconds):
            return None
        return stats.generated(inflight, seconds)

    def _start_epoch(self, at: float, *, burst: bool = False) -> None:
        self.engine_p90.update(self.p90())
        self._epoch_at = at
        self._evidence.start_epoch(at, burst=burst)

    # -- introspection ------------------------------------------------------------------------

    def state(self) -> dict[str, object]:
        """A JSON-ready account of this backend's limiter for /admin/state."""
        p90, p50, _, _ = self._evidence.percentiles(self._evidence.live(), None, self._engine_stats)
        stats = self._engine_stats
        d = self._last_decision
        return {
            "algorithm": self.algorithm.name,
            "limit": self.limit,
            "controlled": self.controlled,
            "ceiling": self._ceiling,
            "kv_ceiling": self._kv.kv_ceiling(),
            "floor": self._floor,
            "inflight": self.inflight,
            "p90": {s: round(v, 6) for s, v in p90.items()},
            "p50": {s: round(v, 6) for s, v in p50.items()},
            "samples": len(self._evidence),
            "tokens_per_event": _rounded(self._evidence.tokens_per_event),
            "kv_usage": stats.kv_usage if stats is not None else None,
            "waiting": stats.waiting if stats is not None else None,
            "preemptions_total": stats.preemptions_total if stats is not None else None,
            "sla": self.sla.targets(),
            "kv_capacity_tokens": self._kv.capacity,
            "running": stats.running if stats is not None else None,
            "outside_engine": stats.outside(self.inflight) if stats is not None else None,
            "tokens_per_request": _rounded(self._kv.tokens_per_request),
            "kv_tokens_per_running": _rounded(self._kv.per_running),
            "last_change_at": self._last_change_at,
            "sla_infeasible": d is not None and d.sla_infeasible,
            "latency_floor": None
            if d is None or d.latency_floor is None
            else {s: round(v, 6) for s, v in d.latency_floor.items()},
            "last_decision": None
            if d is None
            else {"direction": d.direction.value, "reason": d.reason, "detail": d.detail},
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
