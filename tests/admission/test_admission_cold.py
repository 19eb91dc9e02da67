"""A cold queue: what the refused are told before anything is measured."""

from __future__ import annotations

import asyncio

import pytest
from admission_fakes import FakeLease, make_queue, settle

from gateway.admission import Rejected, Ticket
from gateway.admission.advice import golden
from tests.clock import FakeClock


async def test_a_refusal_in_a_cold_queue_waits_for_the_first_measurement_and_is_booked_on_it() -> None:
    q, pool, clock = make_queue(1, clock=FakeClock(), max_depth=3, min_backlog=0.05)
    held = await q.admit(Ticket("a"))
    waiting = [asyncio.create_task(q.admit(Ticket("a"))) for _ in range(3)]
    await settle()
    refused = asyncio.create_task(q.admit(Ticket("a")))  # queue full, no rate yet: it holds
    await settle()
    assert not refused.done()
    for task in waiting:  # meanwhile one slot frees every 20 ms
        clock.advance(0.02)
        assert isinstance(held, FakeLease)
        held.release(None)
        await settle()
        held = await task
    with pytest.raises(Rejected) as err:
        await asyncio.wait_for(refused, 5)
    assert err.value.reason == "queue_full" and err.value.should_retry
    # Booked at the 50/s just measured, not spread over the 30 s timeout (its first would be 18.9 s).
    assert err.value.retry_after < 0.5
    held.release(None)
    assert pool.inflight == 0


async def test_with_nothing_measured_in_time_the_refused_are_spread_over_the_timeout() -> None:
    q, _, _ = make_queue(0, clock=FakeClock(), max_depth=1, min_backlog=0.01)
    waiter = asyncio.create_task(q.admit(Ticket("a")))
    await settle()
    with pytest.raises(Rejected) as err:
        await asyncio.wait_for(q.admit(Ticket("a")), 5)
    assert err.value.retry_after == pytest.approx(1.0 + 29.0 * golden(1))
    waiter.cancel()
    await settle()
