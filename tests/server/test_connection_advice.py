"""Retry advice for clients refused at the connection cap: spread, from the rate connections close."""

from __future__ import annotations

import random

import pytest

from gateway.server.connection_advice import ConnectionAdvice


def closing_at(rate: float, seconds: float) -> tuple[ConnectionAdvice, float]:
    """Advice after connections closed steadily at `rate` per second for `seconds`; and the time."""
    advice = ConnectionAdvice(now=0.0, rng=random.Random(7))
    n = int(rate * seconds)
    for i in range(1, n + 1):
        advice.closed(i / rate)
    return advice, n / rate


def test_without_a_rate_a_wave_of_refusals_is_spread_over_the_horizon() -> None:
    advice = ConnectionAdvice(now=0.0, rng=random.Random(1), floor=1.0, horizon=10.0)
    told = [advice.retry_after(0.0) for _ in range(200)]
    assert all(1.0 <= t <= 11.0 for t in told)
    per_second = [sum(1 for t in told if s <= t < s + 1) for s in range(2, 10)]
    assert min(per_second) >= 200 / 10 / 2  # every second of the horizon takes its share


def test_with_a_measured_rate_returns_are_booked_no_faster_than_connections_close() -> None:
    advice, now = closing_at(100.0, 10.0)
    assert advice.rate(now) == pytest.approx(100.0, rel=0.05)
    told = sorted(advice.retry_after(now) for _ in range(300))
    assert told[0] < 0.1 and told[-1] == pytest.approx(3.0, rel=0.1)  # 300 at 100/s: 3 s
    for start in (0.0, 0.5, 1.0, 2.0):  # any second takes about what closes in a second
        assert sum(1 for t in told if start <= t < start + 1.0) <= 100 * 1.1 + 1


def test_a_slow_close_rate_never_advises_past_what_the_sdk_waits_for() -> None:
    advice, now = closing_at(1.0, 20.0)
    rate = advice.rate(now)
    assert rate == pytest.approx(1.0, rel=0.15)
    told = [advice.retry_after(now) for _ in range(200)]
    assert max(told) <= 61.0
    for start in range(11, 60, 10):  # past the spread, one return per connection that closes
        assert sum(1 for t in told if start <= t < start + 10) <= 10 * rate + 1


@pytest.mark.parametrize(("floor", "horizon"), [(0.0, 10.0), (5.0, 1.0)])
def test_bounds_are_checked(floor: float, horizon: float) -> None:
    with pytest.raises(ValueError):
        ConnectionAdvice(now=0.0, rng=random.Random(), floor=floor, horizon=horizon)
