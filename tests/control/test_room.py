"""The burst room: which fills of a limit are bursts, and the room a burst after a quiet spell gets."""

from __future__ import annotations

from gateway.control.room import QUIET, BurstRoom


def test_a_fresh_backend_is_quiet_so_its_first_fill_is_a_burst() -> None:
    room = BurstRoom(0.0)
    assert room.quiet()
    assert room.tick(0.5, binding=True)
    assert not room.tick(1.0, binding=True)  # still bound: the same load, no new burst


def test_a_fill_is_a_burst_only_after_quiet_seconds_of_idle_ticks() -> None:
    room = BurstRoom(0.0)
    room.tick(1.0, binding=True)
    room.tick(1.0 + QUIET / 2, binding=False)
    assert not room.tick(1.0 + QUIET, binding=True)  # idle for less than QUIET: not a burst
    for t in (2.0 + QUIET / 2, 2.0 + QUIET, 2.0 + 1.5 * QUIET):
        room.tick(t, binding=False)
    assert room.tick(3.0 + 1.5 * QUIET, binding=True)


def test_a_late_tick_is_no_quiet_spell() -> None:
    # The limit bound at 1 s; the next tick comes 10 s late (a busy host) and sees it bind again:
    # no tick saw it idle in between, so the gap is no quiet spell and the fill no burst.
    room = BurstRoom(0.0)
    room.tick(1.0, binding=True)
    assert not room.tick(11.0, binding=True)
    assert not room.quiet()


def test_while_quiet_the_room_is_what_the_cache_holds_whole_under_the_ceiling() -> None:
    room = BurstRoom(0.0)
    assert room.in_force(8, 41, 256) == 41
    assert room.in_force(8, 41, 30) == 30
    assert room.in_force(50, 41, 256) == 50  # never below the limit
    assert room.in_force(8, None, 256) == 8  # nothing known of the cache: no room


def test_the_tick_that_sees_the_limit_bind_ends_the_room() -> None:
    room = BurstRoom(0.0)
    room.tick(0.5, binding=True)
    assert room.in_force(8, 41, 256) == 8
