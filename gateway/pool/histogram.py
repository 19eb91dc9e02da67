"""Window quantiles from two snapshots of a cumulative Prometheus histogram.

vLLM exports latency histograms (`vllm:time_to_first_token_seconds`, ...) as cumulative bucket
counters: `_bucket{le="0.5"}` counts every request ever observed at or below 0.5 s. Subtracting the
previous scrape's counters from the current one gives the histogram of the requests finished between
the two scrapes; its quantile is that window's P90, for every request the backend served, streaming
or not.

The quantile follows Prometheus' `histogram_quantile` (prometheus/prometheus, promql/quantile.go;
documented at prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile):
rank = q x total; find the first bucket whose cumulative count reaches the rank; interpolate
linearly between that bucket's lower bound (the previous bucket's `le`, or 0 for the first bucket
when its bound is positive) and its upper bound. A rank that lands in the `+Inf` bucket returns the
largest finite bound. A counter that went down (the backend restarted) makes the delta meaningless,
so the current snapshot is used alone, as Prometheus' `rate()` treats a reset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

Buckets = Mapping[float, float]
"""Upper bound `le` (math.inf for "+Inf") -> cumulative count, as one scrape reported them."""


def bucket_delta(previous: Buckets | None, current: Buckets) -> dict[float, float]:
    """Cumulative counts of what was observed between two scrapes (current alone after a reset)."""
    if not previous:
        return dict(current)
    delta: dict[float, float] = {}
    for le, count in current.items():
        d = count - previous.get(le, 0.0)
        if d < 0:
            return dict(current)
        delta[le] = d
    return delta


def quantile(q: float, buckets: Buckets) -> float | None:
    """The q-quantile of a cumulative histogram; None when it holds no observations."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    bounds = sorted(buckets)
    if not bounds:
        return None
    # Cumulative counts must not decrease; a torn scrape can break that, so repair as Prometheus
    # does (it takes the running maximum).
    counts: list[float] = []
    running = 0.0
    for le in bounds:
        running = max(running, buckets[le])
        counts.append(running)
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    index = next(i for i, c in enumerate(counts) if c >= rank)
    upper = bounds[index]
    if math.isinf(upper):
        finite = [b for b in bounds if not math.isinf(b)]
        return finite[-1] if finite else None
    if index == 0:
        if upper <= 0:
            return upper
        lower, below = 0.0, 0.0
    else:
        lower, below = bounds[index - 1], counts[index - 1]
    in_bucket = counts[index] - below
    if in_bucket <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / in_bucket


def window_quantile(q: float, previous: Buckets | None, current: Buckets) -> float | None:
    """The q-quantile of what the histogram observed between two scrapes."""
    return quantile(q, bucket_delta(previous, current))


def window_count(previous: Buckets | None, current: Buckets) -> float:
    """How many observations arrived between two scrapes (the `+Inf` bucket's delta)."""
    delta = bucket_delta(previous, current)
    return delta.get(math.inf, max(delta.values(), default=0.0))
