"""When a limit takes effect, tick by tick, on hand-built observations."""

from __future__ import annotations

from limits_helpers import make_obs

from gateway.control.algorithms.sla.in_force import InForce


def test_a_raise_is_in_force_from_the_change() -> None:
    in_force = InForce()
    assert (
        in_force.seconds(make_obs(limit=12, peak_inflight=10, now=101.0, interval=1.0, since_change=1.0))
        == 1.0
    )
    assert in_force.seconds(make_obs(limit=12, now=103.0, interval=1.0, since_change=3.0)) == 3.0


def test_a_cut_is_in_force_once_no_more_than_the_limit_are_in_flight() -> None:
    in_force = InForce()
    for t in (1.0, 2.0, 3.0):  # the requests admitted under the old limit of 10 still run
        assert (
            in_force.seconds(make_obs(limit=5, peak_inflight=10, now=100.0 + t, interval=1.0, since_change=t))
            == 0
        )
    # From the start of the first tick that never saw more than 5 in flight.
    assert (
        in_force.seconds(make_obs(limit=5, peak_inflight=5, now=104.0, interval=1.0, since_change=4.0)) == 1.0
    )
    assert in_force.seconds(make_obs(limit=5, now=106.0, interval=2.0, since_change=6.0)) == 3.0


def test_a_new_epoch_starts_the_count_again() -> None:
    in_force = InForce()
    assert in_force.seconds(make_obs(limit=5, now=110.0, interval=1.0, since_change=10.0)) == 10.0
    assert in_force.new_epoch
    assert in_force.seconds(make_obs(limit=5, now=111.0, interval=1.0, since_change=11.0)) == 11.0
    assert not in_force.new_epoch
    # The limit filled after a quiet spell at 112: a new epoch, in force from its start.
    assert in_force.seconds(make_obs(limit=5, now=113.0, interval=1.0, since_change=1.0)) == 1.0
    assert in_force.new_epoch
