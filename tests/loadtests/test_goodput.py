"""Goodput accounting: which tokens fall in the window, which requests meet the targets."""

from __future__ import annotations

import pytest

from loadtests import goodput
from loadtests.closed_loop import RequestRecord


def done(
    start: float,
    end: float,
    tokens: int,
    *,
    first: float | None = None,
    stream: bool = True,
    queue_wait: float = 0.0,
    status: int = 200,
) -> RequestRecord:
    return RequestRecord(
        stream=stream,
        start=start,
        first_token=first,
        last_token=end if first is not None else None,
        end=end,
        completion_tokens=tokens,
        status=status,
        queue_wait=queue_wait,
        finished=True,
    )


def test_stream_tokens_are_spread_between_first_and_last_token() -> None:
    # 100 tokens from t=1 to t=5; the window [3, 10) holds the last half of them.
    record = done(0.0, 5.0, 100, first=1.0)
    assert goodput.window_tokens(record, 3.0, 10.0) == pytest.approx(50.0)
    assert goodput.tokens_per_s([record], 3.0, 10.0) == pytest.approx(50.0 / 7.0)


def test_non_streaming_tokens_count_at_the_end_only() -> None:
    inside = done(0.0, 4.0, 80, stream=False)
    after = done(2.0, 11.0, 80, stream=False)
    assert goodput.window_tokens(inside, 3.0, 10.0) == 80.0
    assert goodput.window_tokens(after, 3.0, 10.0) == 0.0


def test_unfinished_failed_and_cancelled_requests_deliver_nothing() -> None:
    cancelled = done(0.0, 5.0, 100, first=1.0)
    cancelled.finished = False
    cancelled.error = "cancelled when the window ended"
    refused = done(0.0, 5.0, 0, status=429)
    assert goodput.window_tokens(cancelled, 0.0, 10.0) == 0.0
    assert goodput.window_tokens(refused, 0.0, 10.0) == 0.0
    assert not goodput.meets(refused, {"e2e": 100.0})


def test_latencies_exclude_the_wait_in_the_gateway_queue() -> None:
    # Waited 2 s in the gateway, first token 0.3 s after dispatch, then 10 tokens in 0.9 s.
    record = done(0.0, 3.2, 10, first=2.3, queue_wait=2.0)
    values = goodput.latencies(record)
    assert values["ttft"] == pytest.approx(0.3)
    assert values["tpot"] == pytest.approx(0.1)
    assert values["e2e"] == pytest.approx(1.2)


def test_goodput_counts_only_requests_meeting_every_target() -> None:
    fast = done(0.0, 2.0, 100, first=0.1)  # ttft 0.1, tpot 1.9/99
    slow_first = done(0.0, 2.0, 100, first=1.5)  # ttft 1.5
    slow_tokens = done(0.0, 9.0, 100, first=0.1)  # tpot 0.09
    targets = {"ttft": 1.0, "tpot": 0.05}
    records = [fast, slow_first, slow_tokens]
    assert [goodput.meets(r, targets) for r in records] == [True, False, False]
    total = goodput.tokens_per_s(records, 0.0, 10.0)
    good = goodput.tokens_per_s(records, 0.0, 10.0, targets)
    assert total == pytest.approx(30.0)
    assert good == pytest.approx(10.0)


def test_a_target_the_request_cannot_show_is_not_met() -> None:
    # A non-streaming request has no first token: a TTFT target cannot be judged as met.
    record = done(0.0, 1.0, 10, stream=False)
    assert not goodput.meets(record, {"ttft": 5.0})
    assert goodput.meets(record, {"e2e": 5.0})


def test_p90_covers_requests_that_finished_after_the_warmup() -> None:
    warmup = done(0.0, 0.5, 10, stream=False)  # ended in the warm-up: not judged
    drained = done(19.0, 22.0, 10, first=19.1)  # sent before the stop, finished in the drain
    records = [done(float(i) - 1.0, float(i) + i / 10, 10, stream=False) for i in range(1, 10)]
    p90 = goodput.p90s([warmup, drained, *records], 1.0, 20.0)
    # e2e values 1.1 .. 1.9 and 3.0; nearest rank P90 of 10 values is the 9th.
    assert p90["e2e"] == pytest.approx(1.9)
    assert p90["ttft"] == pytest.approx(0.1)
