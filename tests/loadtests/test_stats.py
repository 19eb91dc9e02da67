"""Benchmark percentiles are the gateway's nearest rank, and leave out missing values."""

from __future__ import annotations

from loadtests.stats import p90, percentile


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.9) is None
    assert percentile([5.0], 0.9) == 5.0
    values = [float(i) for i in range(10, 0, -1)]
    assert percentile(values, 0.9) == 9.0 and percentile(values, 0.5) == 5.0
    assert percentile(values, 1.0) == 10.0 and percentile(values, 0.0) == 1.0


def test_missing_values_are_left_out_not_counted_as_zero() -> None:
    assert p90([None, 3.0, None, 1.0, 2.0]) == 3.0
    assert p90([None, None]) is None
