"""What one limit showed: the share of requests over target, tested both ways, and the rate.

The SLA is a P90, and P90 <= T exactly when a request misses T with probability p <= 0.1. Over an
epoch (the requests dispatched since the limit last changed), the misses k of n are Binomial(n, p).
`Misses.over` is the one-sided test of p > 0.1 (P(X >= k | p = 0.1) <= alpha) and `Misses.under`
its mirror, p < 0.1 (P(X <= k | p = 0.1) <= alpha): the same alpha each way, so a cut and a raise
need the same strength of evidence, and between the two the limit holds.

`RateMeter` measures the output tokens/s of one limit once its requests have turned over, with its
standard error from the spread of the per-tick rates, so a gain counts only beyond its noise.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, replace
from statistics import NormalDist

from gateway.control.algorithms.base import binomial_tail
from gateway.types import SLA, Observation, Signal

MISS = 0.1
"""The miss share a P90 target allows (1 - 0.9): the SLA's definition, not a tuning constant."""


def z_of(alpha: float) -> float:
    """The one-sided standard-normal quantile of significance `alpha`."""
    return NormalDist().inv_cdf(1.0 - alpha)


@dataclass(frozen=True, slots=True)
class Count:
    n: int
    k: int
    """Of n values, k over the target."""

    @classmethod
    def of(cls, values: list[float], target: float) -> Count:
        """How many of `values` are over `target`."""
        return cls(len(values), sum(1 for v in values if v > target))

    @property
    def share(self) -> float:
        return self.k / self.n if self.n else 0.0


def counts(obs: Observation, sla: SLA) -> dict[Signal, Count]:
    """Per SLA signal with a target, how many of this epoch's values missed it.

    A P90 read from the engine's histogram has no values: it counts as n values all over the target
    or all under it, which is what its side of the target says of them."""
    out: dict[Signal, Count] = {}
    for signal, target in sla.targets().items():
        values = obs.values.get(signal)
        if values:
            out[signal] = Count.of(values, target)
        elif (p90 := obs.p90.get(signal)) is not None:
            n = obs.counts.get(signal, 0)
            out[signal] = Count(n, n if p90 > target else 0)
    return out


def burst(obs: Observation, sla: SLA, alpha: float) -> int | None:
    """The size of the burst that began the epoch, where what its requests measured shows every SLA
    signal it measures under target at `alpha`; else None.

    Requests sent together prefill together, so their latency bounds from above what as many in
    flight measure once arrivals spread out (gateway.control.bounds), and a request that has not
    measured a signal yet counts as a miss: the limit may go to the burst's size. Never a cut: an
    upper bound shows no miss."""
    size = 0
    for signal, target in sla.targets().items():
        values = obs.bounds.get(signal)
        if not values:
            continue
        if not under(Count.of(values, target), alpha):
            return None
        size = max(size, len(values))
    return size or None


def over(c: Count, alpha: float) -> bool:
    """The values show, at `alpha`, that more than a tenth miss: the P90 is over target.

    At most the expected misses (n / 10) the tail is at least about a half, more than any alpha
    allowed; the sum is taken only beyond it, where its terms do not underflow."""
    return c.k > c.n * MISS and binomial_tail(c.n, c.k, MISS) <= alpha


def under(c: Count, alpha: float) -> bool:
    """The values show, at `alpha`, that fewer than a tenth miss: the P90 is under target (the
    mirror of `over`: the values that met the target, n - k, are too many for Binomial(n, 0.9))."""
    return c.k < c.n * MISS and binomial_tail(c.n, c.n - c.k, 1.0 - MISS) <= alpha


def lower(low: list[float], high: list[float], alpha: float) -> bool:
    """The values `low` are significantly smaller than `high` (one-sided Mann-Whitney U test,
    normal approximation): unlike the miss shares, it still sees latency fall where every value
    at both limits misses."""
    n1, n2 = len(low), len(high)
    if n1 == 0 or n2 == 0:
        return False
    ordered = sorted(high)
    u = sum(
        n2 - bisect_right(ordered, x) + 0.5 * (bisect_right(ordered, x) - bisect_left(ordered, x))
        for x in low
    )
    spread = math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12.0)
    return (u - n1 * n2 / 2.0) / spread >= z_of(alpha)


def no_lower(low: list[float], high: list[float], alpha: float) -> bool:
    """`low` stands on at least as many values as `high` and still is not significantly smaller:
    a fall, had there been one, had the same power to show."""
    return len(low) >= len(high) and not lower(low, high, alpha)


def reach(high: int, at_high: list[float], low: int, at_low: list[float], target: float) -> float:
    """The limit where the line through the P90s of `at_high` (read at limit `high`) and `at_low`
    (at `low`) meets `target`: latency is affine in the limit (gc.model), and where its part that
    no limit removes is over the target, no limit meets it (infinite where the line does not fall)."""
    p_high, p_low = _p90(at_high), _p90(at_low)
    if p_high is None or p_low is None or p_high <= p_low or high == low:
        return math.inf
    slope = (p_high - p_low) / (high - low)
    return low - (p_low - target) / slope


def _p90(values: list[float]) -> float | None:
    return sorted(values)[math.ceil(0.9 * len(values)) - 1] if values else None


class RateMeter:
    """Output tokens/s of the limit in force, counted from `settle` after it took effect."""

    def __init__(self) -> None:
        self.tokens = 0.0
        self.seconds = 0.0
        self._rates: list[float] = []

    def add(self, tokens: float, seconds: float) -> None:
        if seconds <= 0:
            return
        self.tokens += tokens
        self.seconds += seconds
        self._rates.append(tokens / seconds)

    @classmethod
    def of(cls, rates: list[float]) -> RateMeter:
        """A meter of ticks of one second each at `rates`."""
        meter = cls()
        for rate in rates:
            meter.add(rate, 1.0)
        return meter

    @property
    def ticks(self) -> int:
        return len(self._rates)

    @property
    def rates(self) -> list[float]:
        """The per-tick rates, oldest first."""
        return list(self._rates)

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def stderr(self) -> float:
        """The standard error of `rate` from the per-tick rates' spread (infinite on one tick)."""
        m = len(self._rates)
        if m < 2:
            return math.inf
        mean = sum(self._rates) / m
        var = sum((r - mean) ** 2 for r in self._rates) / (m - 1)
        return math.sqrt(var / m)


def drift(meter: RateMeter, recent: int, alpha: float) -> float:
    """How much faster the engine ran the same limit before its last `recent` ticks than in them
    (the rate before over the rate since), where the difference is beyond both rates' noise at
    `alpha`, either way; else 1."""
    rates = meter.rates
    if recent < 2 or len(rates) - recent < 2:
        return 1.0
    before, since = RateMeter.of(rates[:-recent]), RateMeter.of(rates[-recent:])
    if since.rate <= 0 or not (gained(since, before, alpha) or gained(before, since, alpha)):
        return 1.0
    return before.rate / since.rate


def at_pace(obs: Observation, scale: float) -> Observation:
    """`obs` with every latency multiplied by `scale`: by Little's law at a held limit, W = L / X,
    latency moves inversely with the engine's rate, and values read before it changed are of the
    old engine (an epoch's values span many turnovers while the limit holds)."""
    if scale == 1.0:
        return obs
    return replace(
        obs,
        p90={s: v * scale for s, v in obs.p90.items()},
        p50={s: v * scale for s, v in obs.p50.items()},
        values={s: [v * scale for v in vs] for s, vs in obs.values.items()},
    )


def gained(high: RateMeter, low: RateMeter, alpha: float) -> bool:
    """`high` delivered more than `low` beyond both rates' noise, at significance `alpha`."""
    noise = math.hypot(high.stderr, low.stderr)
    return math.isfinite(noise) and high.rate - low.rate > z_of(alpha) * noise


def engine_queue(obs: Observation) -> float:
    """Of the gateway's own requests, those waiting in the engine's queue: its `waiting`, but no
    more than the gateway has in flight (the rest is others' traffic, which says nothing of ours)."""
    stats = obs.engine_stats
    if stats is None or stats.waiting is None:
        return 0.0
    return min(stats.waiting, float(obs.peak_inflight))


def outside(obs: Observation) -> float:
    """Requests in flight that the engine counts neither running nor waiting (its front end holds
    them): they take none of its batch or KV cache."""
    return obs.outside_engine or 0.0
