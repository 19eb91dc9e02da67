"""The client-side TTFT budget in the admission queue: an interactive request waits only what its
target (its model's, or its tenant's own) leaves after the engine, is refused at once when its turn
cannot come in time, is refused (never dispatched) when its budget runs out, and a patient request
waits behind it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from admission_fakes import FakeLease, FakePool, make_queue, settle

from gateway.admission import AdmissionQueue, Rejected, Ticket
from gateway.admission.budget import wait_budget
from gateway.types import SLA
from tests.clock import FakeClock


def make(
    capacity: int = 0, *, budget: float | None = 0.5, **kw: Any
) -> tuple[AdmissionQueue[FakeLease], FakePool, FakeClock]:
    kw.setdefault("min_backlog", 0.05)
    return make_queue(capacity, budget=lambda tenant: budget, **kw)


def test_the_budget_is_what_the_engine_leaves_of_the_target_and_at_least_the_queues_share() -> None:
    sla = SLA(ttft_p90=2.0, tpot_p90=0.05)
    # An engine not measured yet is taken at its share: the queue gets its own, not the target.
    assert wait_budget(sla, {}, 0.25) == 0.5
    assert wait_budget(sla, {"ttft": 0.5, "tpot": 9.0}, 0.25) == 1.5
    # An engine over its share (1.5 s) does not take the queue's 0.5 s.
    assert wait_budget(sla, {"ttft": 3.0}, 0.25) == 0.5
    # The least over the targets the wait counts toward; none of them: no budget.
    assert wait_budget(SLA(ttft_p90=2.0, e2e_p90=1.0), {"e2e": 0.8, "ttft": 0.1}, 0.0) == pytest.approx(0.2)
    assert wait_budget(SLA(tpot_p90=0.05), {"ttft": 0.1}, 0.25) is None


async def test_a_waiter_whose_budget_runs_out_is_refused_429_and_never_dispatched() -> None:
    q, pool, clock = make(budget=0.5)
    waiting = asyncio.create_task(q.admit(Ticket("a", arrived=clock())))
    await settle()
    assert q.depth == 1
    clock.advance(0.6)
    q.wake()
    await settle()
    err = waiting.exception()
    assert isinstance(err, Rejected)
    assert (err.status, err.reason) == (429, "deadline")
    assert "budget ran out" in err.message and err.retry_after > 0
    pool.open(1)  # a slot comes too late for it: nobody takes it
    await settle()
    assert pool.leases == [] and q.depth == 0


async def test_the_budget_counts_from_arrival_not_from_entering_the_queue() -> None:
    q, _, clock = make(budget=0.5)
    with pytest.raises(Rejected) as err:
        await q.admit(Ticket("a", arrived=clock() - 0.6))
    assert (err.value.status, err.value.reason) == (429, "deadline") and q.depth == 0


async def _firm_backlog(q: AdmissionQueue[FakeLease], pool: FakePool, clock: FakeClock) -> list[Any]:
    """Keep patient waiters queued while one slot frees every 0.1 s for 12 s: a firm 10/s drain."""
    pool.open(1)
    tasks = [asyncio.create_task(q.admit(Ticket("p", timeout=600.0))) for _ in range(200)]
    await settle()
    for _ in range(120):
        clock.advance(0.1)
        pool.leases[-1].release(None)
        await settle()
    return tasks


async def test_an_arrival_whose_turn_comes_after_its_budget_is_refused_at_once() -> None:
    q, pool, clock = make(budget=0.35, timeout=600.0, drain_tau=2.0, max_depth=300)
    patient = await _firm_backlog(q, pool, clock)
    assert q.drain_rate == pytest.approx(10.0, rel=0.2)
    # Two interactive requests ahead, at 10/s: a third one's turn comes within 0.35 s, a fourth's
    # would not.
    ahead = [asyncio.create_task(q.admit(Ticket(t, arrived=clock()))) for t in ("x", "y", "z")]
    await settle()
    assert not any(t.done() for t in ahead)
    with pytest.raises(Rejected) as err:
        await q.admit(Ticket("w", arrived=clock()))
    assert (err.value.status, err.value.reason) == (429, "deadline")
    assert "exceeds the 0.35s left of its time to first token budget" in err.value.message
    assert 0.3 <= err.value.retry_after <= 60
    for t in [*ahead, *patient]:
        t.cancel()
    await settle()


async def test_a_patient_request_waits_past_the_budget_behind_every_interactive_one() -> None:
    q, pool, clock = make(budget=0.5)
    log: list[str] = []

    async def run(ticket: Ticket) -> None:
        lease = await q.admit(ticket)
        log.append(ticket.tenant)
        lease.release(None)

    patient = asyncio.create_task(run(Ticket("patient", timeout=20.0, arrived=clock())))
    await settle()
    clock.advance(5.0)
    q.wake()
    await settle()
    assert not patient.done()  # its 20 s are its own, not the 0.5 s budget
    interactive = asyncio.create_task(run(Ticket("hasty", arrived=clock())))
    await settle()
    pool.open(1)
    await asyncio.wait_for(asyncio.gather(patient, interactive), 5)
    assert log == ["hasty", "patient"]


async def test_a_shorter_x_queue_timeout_than_the_budget_is_kept() -> None:
    q, _, clock = make(budget=5.0)
    ticket = q.classify(Ticket("a", timeout=1.0, arrived=clock()))
    assert (ticket.patient, ticket.wait, ticket.budgeted) == (False, 1.0, False)
    ticket = q.classify(Ticket("a", arrived=clock()))
    assert (ticket.patient, ticket.wait, ticket.budgeted) == (False, 5.0, True)
    ticket = q.classify(Ticket("a", timeout=9.0, arrived=clock()))
    assert (ticket.patient, ticket.wait) == (True, 9.0)


async def test_a_tenants_queue_timeout_longer_than_the_budget_makes_it_patient() -> None:
    q, _, _ = make(budget=0.5, tenant_timeouts={"batchy": 120.0})
    assert q.classify(Ticket("batchy")).patient is True
    assert q.classify(Ticket("other")).patient is False


async def test_each_request_waits_the_budget_of_its_own_tenant() -> None:
    budgets = {"premium": 0.2, None: 1.5}
    q, _, clock = make_queue(0, budget=lambda tenant: budgets.get(tenant, budgets[None]), min_backlog=0.05)
    premium = q.classify(Ticket("premium", arrived=clock()))
    standard = q.classify(Ticket("standard", arrived=clock()))
    assert (premium.wait, premium.budgeted) == (0.2, True)
    assert (standard.wait, standard.budgeted) == (1.5, True)
    assert q.state()["wait_budget"] == 1.5  # the model's own, a tenant's without targets of its own
