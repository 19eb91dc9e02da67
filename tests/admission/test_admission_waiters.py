"""Waiters: fair order kept with a deadline heap; overdue waiters leave in deadline order, once."""

from __future__ import annotations

import asyncio

from gateway.admission import Ticket
from gateway.admission.waiters import ExpiryTimer, Waiters
from gateway.types import Sample


class _Lease:
    def release(self, sample: Sample | None) -> None:
        pass


async def test_overdue_waiters_leave_in_deadline_order_and_removed_ones_are_skipped() -> None:
    loop = asyncio.get_running_loop()
    waiters: Waiters[_Lease] = Waiters(None)
    late = waiters.push(Ticket("a"), loop.create_future(), 0.0, 30.0)
    soon = waiters.push(Ticket("b"), loop.create_future(), 0.0, 10.0)
    gone = waiters.push(Ticket("a"), loop.create_future(), 0.0, 5.0)
    waiters.remove(gone)
    assert waiters.depth == 2 and waiters.earliest_deadline() == 5.0  # a lower bound
    assert list(waiters.overdue(20.0)) == [soon]
    assert waiters.depth == 1 and soon.entry is None and late.entry is not None
    assert list(waiters.overdue(20.0)) == []
    assert waiters.earliest_deadline() == 30.0


async def test_the_heap_is_rebuilt_when_stale_entries_outnumber_the_live_ones() -> None:
    loop = asyncio.get_running_loop()
    waiters: Waiters[_Lease] = Waiters(None)
    kept = waiters.push(Ticket("a"), loop.create_future(), 0.0, 1000.0)
    for i in range(200):
        waiters.remove(waiters.push(Ticket("a"), loop.create_future(), 0.0, 500.0 + i))
    assert list(waiters.overdue(0.0)) == []
    assert waiters.earliest_deadline() == 1000.0 and kept.entry is not None


async def test_the_timer_fires_once_at_the_earliest_deadline_it_was_given_and_not_when_cancelled() -> None:
    loop = asyncio.get_running_loop()
    fired: list[str] = []
    timer = ExpiryTimer(lambda: fired.append("timer"))
    timer.arm(0.02, 0.0)
    timer.arm(10.0, 0.0)  # later: the earlier arming stands
    after = loop.create_future()
    loop.call_later(0.04, lambda: (fired.append("after"), after.set_result(None)))
    await asyncio.wait_for(after, 10)
    assert fired == ["timer", "after"]  # loop timers run in deadline order
    timer.arm(0.02, 0.0)
    timer.cancel()
    later = loop.create_future()
    loop.call_later(0.04, lambda: later.set_result(None))
    await asyncio.wait_for(later, 10)
    assert fired == ["timer", "after"]
