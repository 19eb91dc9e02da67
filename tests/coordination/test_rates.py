"""The shared drain rate from counter readings at irregular times."""

from __future__ import annotations

import pytest

from gateway.coordination.rates import CounterRate


def test_steady_counter_gives_its_rate_whatever_the_reading_times() -> None:
    rate = CounterRate(tau=5.0)
    assert rate.rate() is None
    t, total = 0.0, 0.0
    for dt in [0.3, 1.7, 0.9, 3.2, 0.1, 2.0] * 4:
        t += dt
        total += 12.0 * dt
        rate.observe(t, total)
    assert rate.rate() == pytest.approx(12.0)


def test_moves_to_a_new_rate_with_time_constant_tau() -> None:
    rate = CounterRate(tau=10.0)
    rate.observe(0.0, 0.0)
    rate.observe(10.0, 100.0)  # 10/s
    rate.observe(20.0, 100.0)  # then nothing for one tau
    assert rate.rate() == pytest.approx(10.0 / 2.718281828, rel=1e-6)


def test_a_counter_that_restarted_counts_from_zero_and_same_instant_readings_wait() -> None:
    rate = CounterRate(tau=1.0)
    rate.observe(0.0, 500.0)
    rate.observe(1.0, 4.0)  # Redis restarted: 4 since then
    assert rate.rate() == pytest.approx(4.0)
    rate.observe(1.0, 9.0)  # no time passed: carried to the next reading
    rate.observe(2.0, 9.0)
    assert rate.rate() == pytest.approx(4.0 + (1 - 2.718281828**-1) * (5.0 - 4.0), rel=1e-6)


def test_rejects_a_time_constant_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="tau"):
        CounterRate(tau=0)
