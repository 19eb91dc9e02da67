"""The significance test behind a cut, as arithmetic."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from gateway.control.algorithms.base import binomial_tail, quantile_exceeds


def exact_tails(n: int) -> list[float]:
    """P(X >= k) for k = 0..n, X ~ Binomial(n, 1/10), in integers: C(n, i) 9^(n - i) / 10^n summed."""
    terms = [math.comb(n, i) * 9 ** (n - i) for i in range(n + 1)]
    tails, total = [], 0
    for term in reversed(terms):
        total += term
        tails.append(float(Fraction(total, 10**n)))
    return tails[::-1]


@pytest.mark.parametrize("n", [1, 5, 32, 100, 1200])
def test_the_binomial_tail_is_the_exact_sum(n: int) -> None:
    exact = exact_tails(n)
    for k in range(1, n + 1):
        if exact[k] > 1e-250:
            assert binomial_tail(n, k, 0.1) == pytest.approx(exact[k], rel=1e-9)


@pytest.mark.parametrize(("n", "least"), [(3, 3), (5, 3), (8, 4), (20, 7), (32, 9), (100, 19), (1200, 146)])
def test_a_p90_is_over_target_from_so_many_values_over_it(n: int, least: int) -> None:
    def values(over: int) -> list[float]:
        return [2.0] * over + [0.5] * (n - over)

    assert quantile_exceeds(values(least), 1.0, 0.9, 0.01)
    assert not quantile_exceeds(values(least - 1), 1.0, 0.9, 0.01)


def test_no_value_over_the_target_is_no_evidence() -> None:
    assert not quantile_exceeds([0.5] * 10, 1.0, 0.9, 1.0)
