"""The connection cap with an injected clock: which idle connection makes room, and when none may."""

from __future__ import annotations

from gateway.server.connection_cap import MIN_IDLE, Connections


class Conn:
    def __init__(self) -> None:
        self.evicted = False

    def evict(self) -> None:
        self.evicted = True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_connection_idle_the_longest_makes_room_once_idle_for_min_idle() -> None:
    clock = Clock()
    cap = Connections(2, clock=clock)
    old, newer = Conn(), Conn()
    assert cap.admit(old)
    clock.now += 0.5
    assert cap.admit(newer)
    clock.now += MIN_IDLE - 0.5
    newcomer = Conn()
    assert cap.admit(newcomer)
    assert (old.evicted, newer.evicted, len(cap)) == (True, False, 2)


def test_a_connection_accepted_a_moment_ago_is_not_closed_for_a_newcomer() -> None:
    # Its request is on the way, or unread in the kernel's buffer: closing it would lose it.
    clock = Clock()
    cap = Connections(1, clock=clock)
    fresh = Conn()
    assert cap.admit(fresh)
    clock.now += MIN_IDLE / 2
    assert not cap.admit(Conn())
    assert not fresh.evicted and len(cap) == 1


def test_a_kept_alive_connection_is_idle_from_the_end_of_its_last_response() -> None:
    clock = Clock()
    cap = Connections(2, clock=clock)
    first, second = Conn(), Conn()
    assert cap.admit(first) and cap.admit(second)
    cap.busy(first)
    clock.now += 5.0
    cap.idle(first)  # its response just ended; `second` has sent nothing for five seconds
    assert cap.admit(Conn())
    assert (first.evicted, second.evicted) == (False, True)


def test_a_kept_alive_connection_may_make_room_at_once() -> None:
    # Between requests nothing is in flight on it: its client opens another when it needs one.
    clock = Clock()
    cap = Connections(2, clock=clock)
    kept, fresh = Conn(), Conn()
    assert cap.admit(kept)
    cap.busy(kept)
    assert cap.admit(fresh)
    cap.idle(kept)
    assert cap.admit(Conn())
    assert (kept.evicted, fresh.evicted) == (True, False)


def test_busy_connections_are_never_closed_to_make_room() -> None:
    clock = Clock()
    cap = Connections(1, clock=clock)
    busy = Conn()
    assert cap.admit(busy)
    cap.busy(busy)
    clock.now += 60.0
    assert not cap.admit(Conn())
    assert not busy.evicted
