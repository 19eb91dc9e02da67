"""What the controller knows of the engine: the limit in force and what it has shown so far, the
saturation cap, the limit a probe started from, and a latency floor.

- `Epoch`: the current limit's evidence. Its rate counts from `settle` turnovers after the change
  (Little's law: the requests admitted before it are gone after about one end-to-end latency), and
  it keeps the mean of the engine's queue of the gateway's own requests while they were within it.
  While the limit holds, its rate also tells the engine's pace: by Little's law at a held limit
  latency moves inversely with it, so a change beyond the noise rescales the epoch's older values
  (`pace`).
- The latency line: W = a + b L through the last two limits' P90s (`aim`), where they meet the
  target; through the origin (Little's law past the knee) with one.
- The saturation cap: past it a raise adds only queue, so a raise there must prove a gain. It is
  the least of what the engine ran when it queued the gateway's requests (vLLM's
  num_requests_waiting > 0 means the limit is past the batch it runs), the requests the KV cache
  holds plus those the engine does not yet hold, and the last limit that failed; remembered for
  `memory` turnovers, a limit that fails again twice as long each time (`Model.fail`).
- The floor: when halving the limit did not lower the miss share significantly, latency is not
  the limit's to control; the limit holds where it was, and the P90s that stayed are reported,
  until the SLA is met.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gateway.control.algorithms.goodput.evidence import RateMeter, drift, engine_queue, outside
from gateway.types import Observation, Signal


class Epoch:
    """The evidence of one limit, from the tick it took effect."""

    def __init__(self, limit: int, start: float) -> None:
        self.limit = limit
        self.start = start
        self.rate = RateMeter()
        self.goodput = RateMeter()
        self._queue = 0.0
        self._queue_ticks = 0
        self.interval = 1.0
        """Seconds per tick."""
        self._finished = 0
        self._seconds = 0.0

    def add(self, obs: Observation, settle_at: float) -> None:
        """Count this tick's queue, and its tokens once the limit has settled: all of them, and
        those of requests that met every target (the share of the tokens answered that met)."""
        if obs.peak_inflight <= self.limit:
            self._queue += engine_queue(obs)
            self._queue_ticks += 1
        self.interval = max(obs.interval, 1e-3)
        if obs.now - obs.interval >= settle_at:
            met = 1.0 - obs.missed_tokens / obs.answered_tokens if obs.answered_tokens > 0 else 1.0
            self.rate.add(obs.delivered_tokens, obs.interval)
            self.goodput.add(obs.delivered_tokens * met, obs.interval)

    @property
    def queue(self) -> float:
        """The mean number of the gateway's requests waiting in the engine's queue, over the ticks
        whose requests in flight were within the limit: more in flight (a burst let in after a quiet
        spell, a higher limit's requests not yet drained) is not this limit's queue."""
        return self._queue / self._queue_ticks if self._queue_ticks else 0.0

    def turnover(self, obs: Observation) -> float:
        """Little's law, W = L / lambda, over the epoch so far with `obs` counted, lambda the
        requests that finished per second (also those sent before it). Requests finish in bursts,
        so lambda is read only over a whole turnover: while fewer than L have finished, W is at
        least the epoch's length."""
        self._finished += obs.finished
        self._seconds += obs.interval
        return obs.limit * self._seconds / max(self._finished, obs.limit, 1)

    def pace(self, tau: float, alpha: float) -> float:
        """The factor the latencies read at this limit are off by now: the rate of the settled
        ticks before the last turnover over the rate in it, where it changed beyond the noise."""
        return drift(self.rate, max(2, math.ceil(tau / self.interval)), alpha)

    def measured(self, tau: float) -> bool:
        """The rate stands on at least one turnover and two ticks."""
        return self.rate.ticks >= 2 and self.rate.seconds >= tau


@dataclass(slots=True)
class Probe:
    """A raise past the saturation cap, kept only if it delivers more than `base` did."""

    limit: int
    meter: RateMeter


@dataclass(frozen=True, slots=True)
class Failure:
    """A limit that missed the SLA or gained nothing, by how much (P90/target, 1 for no gain), until
    when it is remembered, and how many times in a row the limit failed (`times`)."""

    limit: int
    missed_by: float
    until: float
    times: int = 1


@dataclass(slots=True)
class Floor:
    limit: int
    p90: dict[Signal, float]


@dataclass(slots=True)
class Model:
    cap: float = math.inf
    """The engine's batch: what it ran when it queued the gateway's requests."""
    cap_until: float = -math.inf
    bad: Failure | None = None
    """The lowest limit that failed, while it is remembered."""
    strikes: Failure | None = None
    """The last failure, kept past its memory: a limit that fails again is remembered twice as
    long (`fail`)."""
    probe: Probe | None = None
    anchor: tuple[int, Signal, list[float]] | None = None
    """The limit a run of cuts began at, the signal that missed there, and its values."""
    reference: tuple[int, list[float]] | None = None
    """The first limit under the anchor that the run of cuts cut from, and its values: what a
    halving from there is compared with, both read since the run began."""
    lowest: dict[Signal, float] = field(default_factory=dict)
    """The lowest P90 per signal seen since the run of cuts began."""
    floor: Floor | None = None
    last: tuple[int, float] | None = None
    """The limit before the one in force and the P90/target it was left at: a second point of the
    latency line (`aim`)."""

    def aim(self, limit: int, r: float) -> float:
        """The limit where the P90 meets its target, on the line through the last limit's P90 and
        this one's (the secant), or through the origin where they do not rise with the limit.

        A request adds a fixed cost to the engine's step, so latency is affine in the limit,
        W = a + b L: a the latency of one request alone, b what each more adds. Past the knee a is
        0 (the engine's throughput X is flat, W = L / X: Little's law), and the line through the
        origin, L / r, is that case; below it a > 0, and a line through the origin would take
        steps far too short (latency hardly grows with L) and cuts too short. Two points both over
        the target extrapolate a cut from two noisy readings of nearly the same latency: there the
        line through the origin stands; and a cut goes at least as far as it, because the line
        through a limit read before the engine slowed would cut too little."""
        proportional = limit / r if r > 0 else math.inf
        if self.last is None or self.last[0] == limit:
            return proportional
        before, was = self.last
        slope = (r - was) / (limit - before)
        if slope <= 0 or min(r, was) > 1.0:
            return proportional
        secant = limit + (1.0 - r) / slope
        return secant if r <= 1.0 else min(secant, proportional)

    def forget(self) -> None:
        """The engine's rate at a held limit changed: the latency line is of another engine. (A
        failure is forgotten by `failed` once the latency, read at the new pace, says so.)"""
        self.last = None

    def moved(self, limit: int, r: float) -> None:
        """The limit leaves `limit`, where the P90/target was `r`."""
        self.last = (limit, r)

    def saturation(self, obs: Observation, r: float) -> float:
        """The limit free growth may reach at `obs.now`, where the P90/target is `r` (infinite
        before any sign of saturation)."""
        cap = self.cap if obs.now < self.cap_until else math.inf
        if obs.kv_fits is not None:
            cap = min(cap, obs.kv_fits + outside(obs))
        bad = self.failed(obs, r)
        return cap if bad is None else min(cap, bad - 1)

    def failed(self, obs: Observation, r: float) -> int | None:
        """The remembered failure, unless it expired or the latency now shows it would meet the
        SLA: latency grows at most in proportion to the limit (Little's law past the knee, less
        below it), so at the failed limit B it is at most r B / L of the target now."""
        bad = self.bad
        if bad is None:
            return None
        if bad.missed_by > 1.0 and r * bad.limit / obs.limit < 1.0:
            self.bad = self.strikes = None
            return None
        if obs.now >= bad.until:
            self.bad = None
            return None
        return bad.limit

    def saturated_at(self, limit: float, now: float, until: float) -> None:
        """The engine queued the gateway's requests at `limit`: free growth stops there."""
        if now >= self.cap_until:
            self.cap = math.inf
        self.cap = min(self.cap, limit)
        self.cap_until = until

    def fail(self, limit: int, missed_by: float, now: float, memory: float) -> None:
        """`limit` failed at `now`: remember it for `memory` seconds, doubled for each time in a
        row a limit at least as high failed before (exponential backoff, as TCP's retransmission
        timer): a retry of a limit that fails costs a turnover of misses, so one that keeps
        failing is tried ever more rarely, while a single failure, maybe noise, is tried soon."""
        last = self.strikes
        times = last.times + 1 if last is not None and limit >= last.limit else 1
        failure = Failure(limit, missed_by, now + memory * 2 ** (times - 1), times)
        if self.bad is None or limit <= self.bad.limit:
            self.bad = self.strikes = failure

    def met(self, limit: int) -> None:
        """The SLA is shown met at `limit`: the latency failures at or below it are no longer in a
        row (one of no gain is not a latency's, and stands)."""
        strikes = self.strikes
        if strikes is not None and strikes.missed_by > 1.0 and limit >= strikes.limit:
            self.strikes = None

    def seen(self, p90: dict[Signal, float]) -> None:
        for signal, value in p90.items():
            self.lowest[signal] = min(value, self.lowest.get(signal, math.inf))

    def end_cuts(self) -> None:
        self.anchor = self.reference = None
        self.lowest = {}
