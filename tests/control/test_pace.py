"""A stream's pace in flight: the mean gap between its events, and a stall shows before the next."""

from __future__ import annotations

import pytest
from limiter_helpers import Progress

from gateway.control.pace import PARTIAL_MIN_EVENTS, pace


def test_the_pace_is_the_mean_gap_between_events_once_there_are_enough() -> None:
    n = PARTIAL_MIN_EVENTS
    assert pace(Progress(10.0, 10.0 + 0.05 * (n - 2), n - 1), 10.5) is None
    assert pace(Progress(), 10.5) is None
    assert pace(Progress(10.0, 10.0 + 0.05 * (n - 1), n), 10.0 + 0.05 * (n - 1)) == pytest.approx(0.05)


def test_a_stall_shows_before_the_next_event_arrives() -> None:
    n = PARTIAL_MIN_EVENTS
    progress = Progress(10.0, 10.0 + 0.05 * (n - 1), n)
    # Silent for 2 s after its last event: the mean had the next one come now.
    assert pace(progress, 10.0 + 0.05 * (n - 1) + 2.0) == pytest.approx((0.05 * (n - 1) + 2.0) / n)
