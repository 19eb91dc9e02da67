"""The burst that filled a limit bounds its latency from above: what its streams measured, infinity
for what they have not, until they finish."""

from __future__ import annotations

import math

import pytest
from limiter_helpers import Progress

from gateway.control.bounds import BurstBounds
from gateway.control.pace import PARTIAL_MIN_EVENTS
from gateway.types import Sample


def test_a_burst_bounds_the_limit_with_what_its_streams_measured_and_inf_for_the_rest() -> None:
    fast = Progress(100.1, 100.1 + 0.02 * (PARTIAL_MIN_EVENTS - 1), PARTIAL_MIN_EVENTS)
    sent = {"fast": (100.0, fast), "no token yet": (100.0, Progress()), "whole": (100.0, None)}
    bounds = BurstBounds()
    bounds.start(sent)
    now = fast.last_at or 0.0
    read = bounds.read(sent, now, None)
    # An answer that comes whole bounds nothing; k unknown: TPOT is the pace per event.
    assert sorted(read["ttft"]) == [pytest.approx(0.1), math.inf]
    assert sorted(read["tpot"]) == [pytest.approx(0.02), math.inf]
    assert "e2e" not in read
    assert sorted(bounds.read(sent, now, 2.0)["tpot"]) == [pytest.approx(0.01), math.inf]  # k = 2

    bounds.finish("fast", sent.pop("fast"), Sample(dispatched_at=100.0, e2e=1.0, tpot=0.03, output_tokens=30))
    bounds.finish("no token yet", sent.pop("no token yet"), None)  # failed: nothing measured
    # Its TTFT from its progress, as reported at the first token.
    assert bounds.read(sent, now, None) == {"ttft": [pytest.approx(0.1)], "tpot": [0.03]}


def test_requests_outside_the_burst_bound_nothing() -> None:
    bounds = BurstBounds()
    bounds.start(())
    watched = (100.0, Progress(100.1, 100.5, PARTIAL_MIN_EVENTS))
    bounds.finish(
        "later", watched, Sample(dispatched_at=100.0, e2e=1.0, ttft=0.1, tpot=0.03, output_tokens=30)
    )
    assert bounds.read({}, 101.0, None) == {}
