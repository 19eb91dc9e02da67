"""The fallback state machine, driven by a hand clock."""

from __future__ import annotations

import pytest

from gateway.coordination.fallback import Fallback, Mode
from tests.clock import FakeClock


def test_starts_in_fallback_until_the_first_renewal() -> None:
    clock = FakeClock(100.0)
    fb = Fallback(clock=clock)
    assert fb.mode is Mode.FALLBACK and fb.reason == "not connected yet"
    assert fb.local_share(12) == 12  # alone as far as it knows: its own limit, not more
    clock.now = 101.5
    assert fb.contact(replicas=3) is True
    assert fb.shared and fb.since == 101.5 and fb.losses == 0
    assert fb.contact(replicas=3) is False


def test_loss_splits_the_last_limit_over_the_last_replica_count() -> None:
    clock = FakeClock(100.0)
    fb = Fallback(clock=clock)
    fb.contact(replicas=3)
    clock.now = 130.0
    assert fb.lost("ConnectionError: refused") is True
    assert fb.lost("ConnectionError: refused") is False  # one loss, not one per failed call
    assert (fb.mode, fb.since, fb.losses) == (Mode.FALLBACK, 130.0, 1)
    clock.now = 145.0
    assert fb.seconds_in_mode() == 15.0
    assert fb.local_share(10) == 3  # 3 replicas x 3 = 9 <= 10
    assert fb.contact(replicas=2) is True
    assert fb.reason == ""


@pytest.mark.parametrize(
    ("limit", "replicas", "share"), [(1, 3, 1), (2, 5, 1), (7, 7, 1), (8, 1, 8), (64, 6, 10)]
)
def test_share_is_never_zero_and_never_above_the_limit(limit: int, replicas: int, share: int) -> None:
    fb = Fallback(clock=FakeClock(100.0))
    fb.contact(replicas)
    fb.lost("down")
    assert fb.local_share(limit) == share
