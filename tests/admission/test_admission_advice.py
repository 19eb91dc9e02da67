"""RetryAdvice: returns booked a slot apart at a firm rate, spread over the timeout without one."""

from __future__ import annotations

import math

import httpx2
import openai
import pytest
from openai._models import FinalRequestOptions

from gateway.admission.advice import RetryAdvice, golden
from gateway.admission.rejection import SDK_MAX_RETRY_AFTER, Rejected
from gateway.proxy.errors import GatewayError


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


def test_firm_advice_past_the_sdk_wait_is_told_that_wait_while_the_queue_can_take_the_rest() -> None:
    """Its turn 80 s away and a queue timeout of 30 s: told 60 s (what every SDK waits as told), it
    then waits 20 s in the queue, within its deadline. It is booked, and the next one behind it."""
    advice = RetryAdvice(floor=1.0)
    assert advice.advise(0.0, 80.0, 1.0, firm=True, horizon=30.0) == SDK_MAX_RETRY_AFTER
    assert advice.advise(0.0, 3.0, 1.0, firm=True, horizon=30.0) == SDK_MAX_RETRY_AFTER  # booked at 81 s
    assert advice.advise(100.0, 3.0, 1.0, firm=True, horizon=30.0) == 3.0  # those bookings lapsed


def test_firm_advice_beyond_the_sdk_wait_and_a_whole_deadline_books_nothing() -> None:
    advice = RetryAdvice(floor=1.0)
    assert (
        advice.advise(0.0, SDK_MAX_RETRY_AFTER + 31, 1.0, firm=True, horizon=30.0) == SDK_MAX_RETRY_AFTER + 31
    )
    # That client is told not to retry: it holds no slot, the next one is not pushed behind it.
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


def sdk_reads(refusal: Rejected) -> tuple[bool, float]:
    """What the OpenAI SDK itself decides on the HTTP answer of `refusal`: whether it retries, and
    after how long (its own rules: `_should_retry`, `_calculate_retry_timeout`)."""
    err = GatewayError(
        refusal.status,
        refusal.message,
        refusal.reason,
        retry_after=refusal.retry_after,
        should_retry=refusal.should_retry,
    )
    response = httpx2.Response(refusal.status, headers=[(k.decode(), v.decode()) for k, v in err.headers()])
    client = openai.AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:1/v1")
    options = FinalRequestOptions.construct(method="post", url="/chat/completions")
    return client._should_retry(response), client._calculate_retry_timeout(2, options, response.headers)


@pytest.mark.parametrize("turn", [5.0, 59.0, 75.0, 90.0])
def test_the_sdk_comes_back_whenever_its_turn_is_within_the_sdk_wait_and_a_deadline(turn: float) -> None:
    """Its turn `turn` s away at a firm rate, queue timeout 30 s: the SDK retries, after at most the
    60 s every release honours, and then waits at most its deadline in the queue."""
    told = RetryAdvice(floor=1.0).advise(0.0, turn, 1.0, firm=True, horizon=30.0)
    retries, after = sdk_reads(Rejected("deadline", retry_after=told, message="busy"))
    assert retries
    assert after == pytest.approx(min(turn, SDK_MAX_RETRY_AFTER), abs=0.001)
    assert turn - after <= 30.0


def test_the_sdk_is_told_not_to_retry_only_past_the_sdk_wait_and_a_whole_deadline() -> None:
    told = RetryAdvice(floor=1.0).advise(0.0, 91.0, 1.0, firm=True, horizon=30.0)
    retries, _ = sdk_reads(Rejected("deadline", retry_after=told, message="busy"))
    assert not retries
