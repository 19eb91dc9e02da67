"""The queue's background class (batch lines) and per-tenant deadlines."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from admission_fakes import FakeLease, FakePool, make_queue, settle

from gateway.admission import AdmissionQueue, Rejected, Releasable, Ticket
from tests.clock import FakeClock


def make(capacity: int = 0, **kw: Any) -> tuple[AdmissionQueue[FakeLease], FakePool, FakeClock]:
    return make_queue(capacity, **kw)


def admit(q: AdmissionQueue, ticket: Ticket, log: list[str]) -> asyncio.Task[Releasable]:
    async def run() -> Releasable:
        lease = await q.admit(ticket)
        log.append(ticket.request_id or "")
        return lease

    return asyncio.create_task(run())


def batch(name: str, tenant: str = "b") -> Ticket:
    return Ticket(tenant, request_id=name, background=True)


async def test_batch_lines_take_free_slots_at_once_and_wait_without_deadline() -> None:
    q, _, clock = make(capacity=2)
    log: list[str] = []
    tasks = [admit(q, batch(f"b{i}"), log) for i in range(4)]
    await settle()
    assert log == ["b0", "b1"] and q.background.depth == 2 and q.depth == 0
    clock.advance(3600)  # far past queue.timeout: a batch line is not shed for waiting
    q.wake()
    await settle()
    assert q.background.depth == 2 and not any(t.done() for t in tasks[2:])
    (await tasks[0]).release(None)
    await settle()
    assert log == ["b0", "b1", "b2"]
    for t in tasks[2:]:
        t.cancel()


async def test_a_freed_slot_goes_to_a_waiting_interactive_request_before_any_batch_line() -> None:
    q, pool, _ = make(capacity=2)
    log: list[str] = []
    running = [admit(q, batch(f"b{i}"), log) for i in range(2)]
    await settle()
    waiting_batch = admit(q, batch("b-late"), log)
    await settle()
    interactive = [admit(q, Ticket("i", request_id=f"i{n}"), log) for n in range(2)]
    await settle()
    assert q.depth == 2 and q.background.depth == 1
    (await running[0]).release(None)
    await settle()
    assert log[-1] == "i0"
    (await running[1]).release(None)
    await settle()
    assert log[-1] == "i1" and not waiting_batch.done()
    (await interactive[0]).release(None)  # no interactive request waits now: the batch line goes
    await settle()
    assert log[-1] == "b-late"
    for t in (interactive[1], waiting_batch):
        (await t).release(None)
    assert pool.inflight == 0


async def test_a_batch_line_does_not_jump_ahead_of_a_waiting_interactive_request() -> None:
    q, pool, _ = make(capacity=0)
    log: list[str] = []
    interactive = admit(q, Ticket("i", request_id="i"), log)
    await settle()
    pool.capacity = 1  # a slot appears without a wake; the batch line's arrival must not take it
    line = admit(q, batch("b"), log)
    await settle()
    assert log == [] and q.background.depth == 1
    q.wake()
    await settle()
    assert log == ["i"]
    line.cancel()
    (await interactive).release(None)


async def test_batch_lines_leave_the_pools_reserve_to_interactive_requests() -> None:
    q, pool, _ = make(capacity=3)
    pool.reserve = 1
    log: list[str] = []
    lines = [admit(q, batch(f"b{i}"), log) for i in range(3)]
    await settle()
    assert log == ["b0", "b1"] and q.background.depth == 1
    interactive = admit(q, Ticket("i", request_id="i"), log)
    await settle()
    assert log[-1] == "i" and q.counters.admitted_fast == 1
    lines[2].cancel()
    for t in (*lines[:2], interactive):
        (await t).release(None)


async def test_a_cancelled_batch_line_leaves_the_lane_and_holds_no_slot() -> None:
    q, pool, _ = make(capacity=1)
    log: list[str] = []
    first = admit(q, batch("b0"), log)
    second = admit(q, batch("b1"), log)
    await settle()
    second.cancel()
    await settle()
    assert q.background.depth == 0
    (await first).release(None)
    await settle()
    assert pool.inflight == 0 and log == ["b0"]


async def test_batch_tenants_share_the_spare_capacity_fairly() -> None:
    q, pool, _ = make(capacity=0)
    log: list[str] = []
    tasks = [admit(q, batch(f"{t}{i}", tenant=t), log) for t in "xy" for i in range(4)]
    await settle()
    pool.capacity = 4
    q.wake()
    await settle()
    assert sorted(name[0] for name in log) == ["x", "x", "y", "y"]
    for t in tasks:
        t.cancel()


async def test_closing_the_queue_answers_waiting_batch_lines() -> None:
    q, _, _ = make(capacity=0)
    line = admit(q, batch("b"), [])
    await settle()
    q.close()
    with pytest.raises(Rejected) as refused:
        await line
    assert refused.value.reason == "shutting_down"


async def test_a_tenants_queue_timeout_replaces_the_queues() -> None:
    q, _, clock = make(capacity=0, timeout=1.0, tenant_timeouts={"patient": 600.0})
    log: list[str] = []
    hasty = admit(q, Ticket("hasty", request_id="h"), log)
    patient = admit(q, Ticket("patient", request_id="p"), log)
    await settle()
    clock.advance(5.0)
    q.wake()
    await settle()
    with pytest.raises(Rejected) as shed:
        await hasty
    assert shed.value.reason == "queue_timeout"
    assert not patient.done() and q.depth == 1
    clock.advance(600.0)
    q.wake()
    await settle()
    with pytest.raises(Rejected):
        await patient


async def test_a_retried_batch_line_is_refused_when_only_the_backends_that_failed_it_have_room() -> None:
    q, pool, _ = make(2)
    pool.names = ("b0", "b1")
    line = Ticket("b", background=True, exclude=frozenset({"b0"}))
    lease = await asyncio.wait_for(q.admit(line), 5)
    assert lease.backend == "b1"
    pool.names = ("b0",)
    with pytest.raises(Rejected) as err:
        await asyncio.wait_for(q.admit(line), 5)
    assert err.value.reason == "no_backend" and q.background.depth == 0
    lease.release(None)
    assert pool.inflight == 0
