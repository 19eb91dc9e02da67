from __future__ import annotations

import random
import statistics

import pytest

from loadtests.lengths import parse_lengths


def test_fixed_is_always_n() -> None:
    dist = parse_lengths("fixed:128")
    rng = random.Random(1)
    assert {dist.sample(rng) for _ in range(50)} == {128}


def test_uniform_stays_in_range_and_covers_it() -> None:
    dist = parse_lengths("uniform: 10, 20")
    rng = random.Random(2)
    draws = [dist.sample(rng) for _ in range(2000)]
    assert min(draws) == 10 and max(draws) == 20
    assert 14 < statistics.mean(draws) < 16


def test_lognormal_has_the_requested_arithmetic_mean() -> None:
    dist = parse_lengths("lognormal:mean=200,sigma=0.5")
    rng = random.Random(3)
    draws = [dist.sample(rng) for _ in range(20000)]
    assert 190 < statistics.mean(draws) < 210
    assert statistics.median(draws) < statistics.mean(draws)  # right-skewed


def test_lognormal_is_clamped_to_max_and_at_least_one() -> None:
    dist = parse_lengths("lognormal:50,2.0,120")
    rng = random.Random(4)
    draws = [dist.sample(rng) for _ in range(5000)]
    assert max(draws) == 120
    assert min(draws) >= 1


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("gauss:10", "unknown length distribution"),
        ("fixed:0", "n must be >= 1"),
        ("uniform:20,10", "low <= high"),
        ("uniform:5", "missing high"),
        ("lognormal:mean=abc,sigma=1", "must be a number"),
        ("lognormal:mean=10,width=1", "unexpected parameter"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_lengths(spec)
