"""A drain rate measured during an outage must not refuse the first burst after it.

The sequence: a backend serves a backlog, hangs while requests wait (the measured rate falls towards
zero), recovers and drains what waited, then nothing happens for 30 s. A burst of 40 then arrives:
it must be taken in whole, as the same burst was before the outage, not refused on the rate of the
outage. Driven on a fake clock through the real admission queue.
"""

from __future__ import annotations

import asyncio

from gateway.admission import AdmissionQueue, Rejected, Releasable, Ticket
from tests.admission.admission_fakes import make_queue, settle
from tests.clock import FakeClock


async def serve(tasks: list[asyncio.Task[Releasable]], clock: FakeClock, service: float) -> int:
    """What is in flight finishes every `service` seconds until every task is answered; how many
    were refused?"""
    refused = 0
    finished: set[int] = set()
    while len(finished) < len(tasks):
        clock.advance(service)
        for i, task in enumerate(tasks):
            if i in finished or not task.done():
                continue
            finished.add(i)
            if isinstance(task.exception(), Rejected):
                refused += 1
            else:
                task.result().release(None)  # wakes the queue
        await settle()
    return refused


async def burst(q: AdmissionQueue, clock: FakeClock, n: int) -> int:
    tasks = [asyncio.create_task(q.admit(Ticket("t"))) for _ in range(n)]
    await settle()
    return await serve(tasks, clock, service=0.05)


async def test_a_burst_after_an_outage_and_an_idle_spell_is_taken_in_whole() -> None:
    q, pool, clock = make_queue(4, clock=FakeClock(), max_depth=1024)
    assert await burst(q, clock, 40) == 0

    # The backend hangs for 20 s with 4 in flight and 6 waiting, then recovers.
    stuck = [await q.admit(Ticket("t")) for _ in range(4)]
    waiting = [asyncio.create_task(q.admit(Ticket("t"))) for _ in range(6)]
    await settle()
    clock.advance(20.0)
    q.wake()
    await settle()
    outage_rate = q.drain_rate
    assert outage_rate is not None and outage_rate < 1.0  # it was 80/s
    for lease in stuck:
        lease.release(None)
    await serve(waiting, clock, service=0.05)  # some were refused in the outage: evidence then
    assert q.depth == 0 and pool.inflight == 0

    clock.advance(30.0)  # idle
    assert q.drain_rate is None  # the outage is no evidence about now
    assert await burst(q, clock, 40) == 0
    assert q.depth == 0 and pool.inflight == 0
