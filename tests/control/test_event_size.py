"""TokensPerEvent: k, the output tokens an event carries, from the streams that finished."""

from __future__ import annotations

import pytest

from gateway.control.event_size import EVENT_MEMORY, TokensPerEvent


def test_tokens_per_event_follow_the_newest_streams() -> None:
    size = TokensPerEvent()
    assert size.value is None  # nothing finished yet
    size.learn(0, 5)  # a stream with no events teaches nothing
    size.learn(10, 0)
    assert size.value is None
    for _ in range(EVENT_MEMORY):
        size.learn(10, 40)
    for _ in range(3 * EVENT_MEMORY):
        size.learn(10, 10)  # the front end caught up
    # Decayed sums, each stream's weight kept at 1 - 1/memory per stream after it.
    keep = 1 - 1 / EVENT_MEMORY
    old = sum(keep**i for i in range(EVENT_MEMORY)) * keep ** (3 * EVENT_MEMORY)
    new = sum(keep**i for i in range(3 * EVENT_MEMORY))
    assert size.value == pytest.approx((40 * old + 10 * new) / (10 * old + 10 * new))
    assert 1.05 < size.value < 1.15  # mostly the newest streams'
