"""Leaf types shared by every layer: the clock, latency samples, engine stats, decisions.

Nothing here imports from the rest of the package, performs I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol

Clock = Callable[[], float]
"""Monotonic seconds. Injected everywhere time matters so tests can drive it by hand."""

Signal = Literal["ttft", "tpot", "e2e"]
SIGNALS: tuple[Signal, ...] = ("ttft", "tpot", "e2e")

# ASGI (https://asgi.readthedocs.io), the interface between the server and the application: the
# gateway is a raw ASGI application and needs only these four names, not a framework.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Sample:
    """One finished request as the proxy measured it, from dispatch to the backend."""

    dispatched_at: float
    e2e: float
    ttft: float | None = None
    """Dispatch to first content token; None for non-streaming requests."""
    tpot: float | None = None
    """Mean gap between output tokens after the first; None with fewer than two tokens."""
    output_tokens: int = 0
    prompt_tokens: int = 0
    ok: bool = True

    def value(self, signal: Signal) -> float | None:
        if signal == "ttft":
            return self.ttft
        if signal == "tpot":
            return self.tpot
        return self.e2e


class StreamProgress(Protocol):
    """How far a streaming response has got, as the proxy sees its events arrive."""

    @property
    def first_at(self) -> float | None:
        """Clock time of the first output event; None before it."""

    @property
    def last_at(self) -> float | None:
        """Clock time of the latest output event."""

    @property
    def events(self) -> int:
        """Output events so far: one token each, or several where the server merged them."""


@dataclass(frozen=True, slots=True)
class SLA:
    """P90 targets in seconds; None means the signal is not part of the SLA."""

    ttft_p90: float | None = None
    tpot_p90: float | None = None
    e2e_p90: float | None = None

    def target(self, signal: Signal) -> float | None:
        if signal == "ttft":
            return self.ttft_p90
        if signal == "tpot":
            return self.tpot_p90
        return self.e2e_p90

    def targets(self) -> dict[Signal, float]:
        return {s: t for s in SIGNALS if (t := self.target(s)) is not None}

    def met_by(self, sample: Sample) -> bool:
        """Whether every latency `sample` measured is at or under its target (one it could not
        measure, a non-streaming answer's TTFT, is not judged): its tokens count as goodput."""
        return self.met(sample.ttft, sample.tpot, sample.e2e)

    def met(self, ttft: float | None, tpot: float | None, e2e: float | None) -> bool:
        """`met_by` on the three latencies themselves (None: not measured, not judged)."""
        return _within(ttft, self.ttft_p90) and _within(tpot, self.tpot_p90) and _within(e2e, self.e2e_p90)


def _within(value: float | None, target: float | None) -> bool:
    """A measured value is at or under its target; a missing value or target is not judged."""
    return value is None or target is None or value <= target


@dataclass(frozen=True, slots=True)
class EngineStats:
    """What one scrape of a vLLM server's /metrics said, taken at `at` (clock seconds)."""

    at: float
    kv_usage: float | None = None
    """Fraction of KV-cache blocks in use, 0..1."""
    waiting: float | None = None
    running: float | None = None
    preemptions_total: float | None = None
    kv_capacity_tokens: int | None = None
    """num_gpu_blocks x block_size from vllm:cache_config_info."""
    ttft_p90: float | None = None
    """Window P90s from the backend's own histograms (bucket deltas since the previous scrape)."""
    tpot_p90: float | None = None
    finished: float = 0.0
    """Requests the backend finished since the previous scrape (e2e histogram count delta)."""
    generation_rate: float | None = None
    """Output tokens/s the backend generated since the previous scrape (vllm:generation_tokens_total)."""
    prefix_hit_share: float | None = None
    """Of the prompt tokens looked up in the backend's prefix cache since the previous scrape, the
    share it held (vllm:prefix_cache_hits_total over _queries_total); None when none were."""

    def p90(self, signal: Signal) -> float | None:
        """The window P90 of TTFT or TPOT; none of e2e, which the gateway measures on every request."""
        if signal == "ttft":
            return self.ttft_p90
        if signal == "tpot":
            return self.tpot_p90
        return None

    def fresh(self, now: float, interval: float) -> bool:
        """Whether this scrape was taken within the last two control intervals of `interval`
        seconds: an older one may describe a backend that has moved on."""
        return self.at > now - 2 * interval

    def generated(self, inflight: int, seconds: float) -> float | None:
        """Output tokens generated over `seconds` at the pace of the last scrape, if every request
        the backend counts may be one of `inflight` sent through the gateway (None otherwise: then
        others' traffic is in the count)."""
        if self.generation_rate is None or not self.counts_only(inflight):
            return None
        return self.generation_rate * seconds

    def counts_only(self, inflight: int) -> bool:
        """Whether every request the backend counts running or waiting may be one of `inflight`
        (else others' traffic is in its counts)."""
        return (
            self.running is not None and self.waiting is not None and self.running + self.waiting <= inflight
        )

    def outside(self, inflight: int) -> float | None:
        """Of `inflight` requests sent to this backend, those it counts neither running nor waiting."""
        if self.running is None or self.waiting is None:
            return None
        return max(0.0, inflight - self.running - self.waiting)


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything a limit algorithm is told at one control tick. Pure data."""

    now: float
    limit: int
    ceiling: int
    """Hard upper bound: configured max, or the KV-derived ceiling when lower."""
    floor: int
    peak_inflight: int
    """Highest inflight since the previous tick: tells whether the limit was binding."""
    queued: int
    """Requests waiting in the gateway that this backend could serve."""
    p90: dict[Signal, float]
    """Window P90 per signal over samples dispatched since the epoch began (`since_change`)."""
    p50: dict[Signal, float]
    sample_count: int
    engine_stats: EngineStats | None = None
    preemptions_delta: float = 0.0
    """Preemptions counted by the backend since the previous tick."""
    since_change: float = 0.0
    """Seconds since the evidence's epoch began: the limit last changed, or it filled up after a
    quiet spell (gateway.control.room)."""
    min_samples: int = 1
    """Samples needed since the last change before latency may move the limit."""
    p90_e2e_per_token: float | None = None
    """Window P90 of e2e seconds per output token (requests with output tokens only)."""
    counts: dict[Signal, int] = field(default_factory=dict)
    """How many values each P90 stands on (a P90 read from the backend's histogram: min_samples)."""
    values: dict[Signal, list[float]] = field(default_factory=dict)
    """The values behind each P90, sorted (none for a P90 read from the backend's histogram)."""
    cohorts: dict[Signal, list[float]] = field(default_factory=dict)
    """Per signal, the value of every request sent since the epoch began, in the order they were
    sent, infinite for those in flight that have not measured it: unlike the values finished so
    far, it leaves out none of the slow ones (gateway.control.evidence)."""
    bounds: dict[Signal, list[float]] = field(default_factory=dict)
    """Upper bounds of the limit's latency per signal, from the burst that began the epoch (infinite
    for what its requests have not measured yet): evidence for a raise, never for a cut
    (gateway.control.bounds)."""
    delivered_tokens: float = 0.0
    """Output tokens this backend produced for the gateway's requests since the previous tick: its
    own count where the last scrape is fresh and counts no more requests than the gateway has in
    flight (`EngineStats.generated`), else the tokens of requests that finished plus the progress
    of streams in flight."""
    lumped_tokens: float = 0.0
    """Of `delivered_tokens`, those counted only when their request finished (a non-streaming
    answer, a stream's last events): whole answers at a time, with a count's noise; none in the
    backend's own count."""
    finished: int = 0
    """Requests that finished since the previous tick."""
    answered_tokens: float = 0.0
    """Output tokens of the requests that finished well since the previous tick."""
    missed_tokens: float = 0.0
    """Of `answered_tokens`, those of requests that missed an SLA target (`SLA.met_by`): throughput
    but not goodput."""
    outside_engine: float | None = None
    """Requests in flight through the gateway that the last scrape counted neither running nor
    waiting (`EngineStats.outside`); None without such a scrape."""
    interval: float = 0.0
    """Seconds since the previous tick (0 at the first)."""
    kv_fits: int | None = None
    """Requests of the current mix the backend's KV cache holds at once (gateway.control.ceiling's
    KV ceiling, whether or not the algorithm is bounded by it); None before the engine said."""
    kv_fits_whole: int | None = None
    """Requests the KV cache holds with every one at its full prompt + output, from the answers
    finished so far (gateway.control.ceiling's whole-request ceiling); None before any."""


class Direction(StrEnum):
    UP = "up"
    DOWN = "down"
    HOLD = "hold"


@dataclass(frozen=True, slots=True)
class Decision:
    limit: int
    direction: Direction
    reason: str
    """A short machine-friendly word (metric label), e.g. 'p90_over_target', 'preemptions'."""
    detail: str = ""
    """Human explanation with the numbers, for /admin/state."""
    latency_floor: dict[Signal, float] | None = None
    """Set when no limit can meet the SLA: per signal over target, the latency the limit does not
    control (the lowest P90 measured at any limit, or the part the engine does not account for)."""

    @property
    def sla_infeasible(self) -> bool:
        return self.latency_floor is not None
