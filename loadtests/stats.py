"""Percentiles of measured values, nearest-rank as the gateway computes its own (gateway.control.window).

One definition everywhere, so that a P90 printed by a benchmark and the P90 the controller acted on
mean the same thing: the ceil(q * n)-th smallest of n values. Missing values (None: a request
without a first token, a stream without a second) are left out rather than counted as zero.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.control.window import nearest_rank


def percentile(values: Iterable[float | None], q: float) -> float | None:
    """The nearest-rank q-quantile (0 <= q <= 1) of the values that are not None; None if none are."""
    return nearest_rank(sorted(v for v in values if v is not None), q)


def p90(values: Iterable[float | None]) -> float | None:
    return percentile(values, 0.9)
