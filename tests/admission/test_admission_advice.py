"""RetryAdvice: returns booked a slot apart at a firm rate, spread over the timeout without one."""

from __future__ import annotations

import math

import pytest

from gateway.admission.advice import RetryAdvice, golden
from gateway.admission.rejection import SDK_MAX_RETRY_AFTER


def test_the_golden_ratio_sequence() -> None:
    assert [round(golden(k), 3) for k in range(1, 6)] == [0.618, 0.236, 0.854, 0.472, 0.09]
    with pytest.raises(ValueError):
        golden(0)


@pytest.mark.parametrize("skip", [1, 2, 3])
def test_any_number_of_unmeasured_refusals_is_spread_evenly_over_the_horizon(skip: int) -> None:
    """Also when every other (or third) value goes to clients advised again later."""
    advice = RetryAdvice(floor=1.0)
    for n in (3, 100, 5000):
        values = sorted([advice.spread(30.0) for _ in range(n * skip)][::skip])
        assert values[0] > 1.0 and values[-1] < 30.0
        # Each tenth of the horizon gets about a tenth of the returns.
        for i in range(10):
            lo, hi = 1.0 + 2.9 * i, 1.0 + 2.9 * (i + 1)
            share = sum(lo <= v < hi for v in values) / n
            assert share == pytest.approx(0.1, abs=max(0.03, 3.0 / n))


def test_the_unmeasured_horizon_is_never_beyond_what_the_sdk_waits_for() -> None:
    advice = RetryAdvice(floor=1.0)
    told = [advice.spread(600.0) for _ in range(1000)]
    assert SDK_MAX_RETRY_AFTER * 0.99 < max(told) < SDK_MAX_RETRY_AFTER


def test_returns_are_booked_one_slot_apart_at_the_drain_rate() -> None:
    advice = RetryAdvice(floor=1.0)
    first = advice.advise(100.0, 5.0, 4.0, firm=True, horizon=30.0)
    assert first == 5.0  # nothing booked: its own wait
    later = [advice.advise(100.0, 5.0, 4.0, firm=True, horizon=30.0) for _ in range(3)]
    assert later == pytest.approx([5.25, 5.5, 5.75])
    # A client whose own wait is longer than the bookings goes by its wait.
    assert advice.advise(100.0, 20.0, 4.0, firm=True, horizon=30.0) == 20.0
    # Bookings in the past lapse: a minute later only the client's wait counts.
    assert advice.advise(160.0, 2.0, 4.0, firm=True, horizon=30.0) == 2.0


def test_firm_advice_beyond_the_sdk_wait_books_nothing() -> None:
    advice = RetryAdvice(floor=1.0)
    assert (
        advice.advise(0.0, SDK_MAX_RETRY_AFTER + 30, 1.0, firm=True, horizon=30.0) == SDK_MAX_RETRY_AFTER + 30
    )
    # That client was told not to retry: it holds no slot, the next one is not pushed behind it.
    assert advice.advise(0.0, 3.0, 1.0, firm=True, horizon=30.0) == 3.0
    assert advice.advise(0.0, 3.0, 1.0, firm=True, horizon=30.0) == 4.0
    assert advice.advise(0.0, math.inf, 0.0, firm=True, horizon=30.0) == math.inf  # a stalled queue says so


def test_a_rate_that_is_not_firm_books_at_half_of_it_and_only_within_the_horizon() -> None:
    """A young rate of 4/s says 100 refused clients need 25 s; it may be off by half either way, so
    returns are booked at 2/s, and what would pass the 30 s horizon is spread within it instead."""
    advice = RetryAdvice(floor=1.0)
    told = [advice.advise(0.0, 0.5, 4.0, firm=False, horizon=30.0) for _ in range(100)]
    booked, spread = told[:59], told[59:]
    assert booked == pytest.approx([1.0 + 0.5 * i for i in range(59)])  # 1.0 ... 30.0
    assert spread == pytest.approx([1.0 + 29.0 * golden(k) for k in range(1, 42)])
    assert advice.advise(0.0, None, None, firm=False, horizon=30.0) == pytest.approx(1.0 + 29.0 * golden(42))


def test_a_young_rate_spreads_no_sooner_than_the_clients_own_wait() -> None:
    """1,000 ahead at a young 50/s: the queue will not empty for about 20 s at that rate, so the
    returns spread over [15, 30] (own wait, at most half the horizon), not from the first second."""
    advice = RetryAdvice(floor=1.0)
    told = [advice.advise(0.0, 20.0, 50.0, firm=False, horizon=30.0) for _ in range(200)]
    assert min(told) >= 15.0 and max(told) <= 30.0
    assert told[0] == pytest.approx(15.0 + 15.0 * golden(1))
