"""BusyCeiling: an engine that refused one of n requests as busy takes n - 1, until `memory` passes."""

from __future__ import annotations

import pytest

from gateway.control.busy import BusyCeiling


def test_a_refusal_sets_the_ceiling_at_the_others_and_it_lifts_after_memory() -> None:
    busy = BusyCeiling(memory=30.0)
    assert busy.bound(0.0) is None
    busy.refused(inflight=6, floor=1, now=0.0)
    assert busy.bound(1.0) == 5
    busy.refused(inflight=9, floor=1, now=10.0)  # more got in since: the lower stands
    assert busy.bound(11.0) == 5
    busy.refused(inflight=3, floor=1, now=20.0)
    assert busy.bound(49.0) == 2  # 30 s after the last refusal, not the first
    assert busy.bound(50.0) is None


def test_never_below_the_floor() -> None:
    busy = BusyCeiling(memory=1.0)
    busy.refused(inflight=1, floor=2, now=0.0)
    assert busy.bound(0.5) == 2
    with pytest.raises(ValueError):
        BusyCeiling(memory=0.0)
