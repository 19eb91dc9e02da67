"""The tests the `goodput` controller moves on: exact binomial arithmetic, no simulation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.control.algorithms.goodput.evidence import Count, RateMeter, gained, lower, no_lower, over, under


def binomial_pmf(n: int, k: int, p: float) -> float:
    return math.comb(n, k) * p**k * (1 - p) ** (n - k)


def chance(n: int, p: float, test: object, alpha: float) -> float:
    """The probability that `test` fires on n values whose true miss share is p."""
    assert callable(test)
    return sum(binomial_pmf(n, k, p) for k in range(n + 1) if test(Count(n, k), alpha))


@pytest.mark.parametrize("n", [5, 20, 29, 60, 150])
@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.2])
def test_at_exactly_the_target_a_cut_and_a_raise_are_each_as_rare_as_alpha(n: int, alpha: float) -> None:
    # P90 exactly at target: a tenth of requests miss. Neither move may fire more often than alpha.
    assert chance(n, 0.1, over, alpha) <= alpha
    assert chance(n, 0.1, under, alpha) <= alpha


@settings(deadline=None)
@given(st.integers(1, 400), st.floats(0.001, 0.5))
def test_the_two_tests_never_agree(n: int, alpha: float) -> None:
    assert not any(over(Count(n, k), alpha) and under(Count(n, k), alpha) for k in range(n + 1))


@settings(deadline=None)
@given(st.integers(1, 300), st.integers(0, 300), st.floats(0.001, 0.5))
def test_each_test_is_monotone_in_the_misses(n: int, k: int, alpha: float) -> None:
    # One more miss never turns a cut into no cut, nor no raise into a raise.
    k = min(k, n - 1)
    assert over(Count(n, k + 1), alpha) >= over(Count(n, k), alpha)
    assert under(Count(n, k + 1), alpha) <= under(Count(n, k), alpha)


def test_far_from_the_target_both_directions_decide_on_few_values() -> None:
    assert over(Count(10, 6), 0.05) and not under(Count(10, 6), 0.05)
    assert under(Count(30, 0), 0.05) and not over(Count(30, 0), 0.05)


def test_lower_latency_must_be_beyond_chance_even_where_everything_misses() -> None:
    high = [2.0 + i / 100 for i in range(40)]
    assert lower([1.2 + i / 100 for i in range(40)], high, 0.05)  # every value still over a 1-s target
    assert not lower(high[::2], high, 0.05)  # half of the same values
    assert no_lower(high, high, 0.05)
    assert not no_lower(high[:10], high, 0.05)  # fewer values: not enough power to say


def meter(rates: list[float]) -> RateMeter:
    m = RateMeter()
    for r in rates:
        m.add(r, 1.0)
    return m


def test_a_gain_counts_only_beyond_the_noise_of_both_rates() -> None:
    steady = meter([1000, 1010, 990, 1005])
    assert gained(meter([1200, 1190, 1210, 1205]), steady, 0.05)
    assert not gained(meter([1010, 1000, 1020, 995]), steady, 0.05)
    assert not gained(meter([5000]), steady, 0.05)  # one tick has no known noise
    assert not gained(steady, steady, 0.05)
