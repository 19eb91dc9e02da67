"""Window quantiles from cumulative histograms, checked against histogram_quantile's arithmetic."""

from __future__ import annotations

import math

import pytest

from gateway.pool.histogram import bucket_delta, quantile, window_count, window_quantile

INF = math.inf


def test_interpolates_inside_the_bucket() -> None:
    # 100 observations: 50 <= 0.1, 40 in (0.1, 0.5], 10 in (0.5, 1].
    buckets = {0.1: 50.0, 0.5: 90.0, 1.0: 100.0, INF: 100.0}
    # rank 90 is the top of the 0.5 bucket.
    assert quantile(0.9, buckets) == pytest.approx(0.5)
    # rank 70: 0.1 + 0.4 * (70 - 50) / 40 = 0.3.
    assert quantile(0.7, buckets) == pytest.approx(0.3)
    # rank 25 in the first bucket: lower bound 0, 0.1 * 25 / 50.
    assert quantile(0.25, buckets) == pytest.approx(0.05)


def test_rank_in_inf_bucket_returns_highest_finite_bound() -> None:
    assert quantile(0.9, {0.1: 1.0, 1.0: 2.0, INF: 10.0}) == 1.0


def test_empty_histogram() -> None:
    assert quantile(0.9, {0.1: 0.0, INF: 0.0}) is None
    assert quantile(0.9, {}) is None


def test_window_is_the_delta_between_scrapes() -> None:
    before = {0.1: 1000.0, 1.0: 1000.0, INF: 1000.0}  # a fast past
    after = {0.1: 1000.0, 1.0: 1010.0, INF: 1010.0}  # ten slow requests since
    # rank 9 of 10 in (0.1, 1]: 0.1 + 0.9 * 9 / 10 = 0.91; the lifetime P90 would be 0.1.
    assert window_quantile(0.9, before, after) == pytest.approx(0.91)
    assert window_count(before, after) == 10.0


def test_counter_reset_uses_current_snapshot() -> None:
    before = {0.1: 50.0, INF: 60.0}
    after = {0.1: 2.0, INF: 4.0}
    assert bucket_delta(before, after) == after
    assert window_quantile(0.5, before, after) == pytest.approx(0.1)


def test_no_new_observations() -> None:
    snap = {0.5: 3.0, INF: 3.0}
    assert window_quantile(0.9, snap, snap) is None
    assert window_count(snap, snap) == 0.0


def test_bad_quantile() -> None:
    with pytest.raises(ValueError):
        quantile(1.5, {INF: 1.0})
