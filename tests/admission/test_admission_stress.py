"""Thousands of requests with random cancellations, acquire failures, limit changes and timeouts:
every acquired slot is released exactly once and nothing is left waiting or in flight."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest
from admission_fakes import FakePool, make_queue

from gateway.admission import Rejected, Ticket
from gateway.types import Sample


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_cancellations_failures_and_timeouts_leak_nothing(seed: int) -> None:
    rng = random.Random(seed)
    q, pool, clock = make_queue(
        pool=FakePool(capacity=6, failure_rate=0.25, rng=random.Random(seed + 100)),
        max_depth=20,
        timeout=3.0,
        tenant_weights={"a": 3.0, "b": 1.0},
        min_backlog=0.5,
    )
    outcomes: Counter[str] = Counter()

    async def client(ticket: Ticket, hold: int) -> None:
        try:
            lease = await q.admit(ticket)
        except Rejected as r:
            assert r.status in (429, 503) and r.retry_after > 0
            outcomes[r.reason] += 1
            return
        except asyncio.CancelledError:
            outcomes["cancelled_waiting"] += 1
            raise
        try:
            for _ in range(hold):
                await asyncio.sleep(0)
            outcomes["served"] += 1
        except asyncio.CancelledError:
            outcomes["cancelled_serving"] += 1
            raise
        finally:
            lease.release(Sample(dispatched_at=clock(), e2e=0.1))

    tasks: list[asyncio.Task[None]] = []
    for step in range(400):
        for _ in range(rng.randint(0, 25)):
            ticket = Ticket(
                tenant=rng.choice("abcd"),
                priority=rng.choice((0, 0, 0, 1, 2)),
                timeout=rng.choice((None, None, 0.5, 1.5, 0.0)),
            )
            tasks.append(asyncio.create_task(client(ticket, rng.randint(0, 4))))
        await asyncio.sleep(0)
        live = [t for t in tasks if not t.done()]
        for t in rng.sample(live, min(len(live), rng.randint(0, 3))):
            t.cancel()
        if rng.random() < 0.1:
            pool.capacity = rng.randint(0, 10)  # the limit moves
        pool.healthy = not (100 <= step < 105 or 300 <= step < 302)  # every backend down
        clock.advance(rng.uniform(0.0, 0.2))
        if rng.random() < 0.5:
            q.wake()  # as the pool does on a release, a limit rise, a backend back up
            if rng.random() < 0.3:
                live = [t for t in tasks if not t.done()]
                for t in rng.sample(live, min(len(live), 5)):
                    t.cancel()  # in the same tick as the grant: the race
        await asyncio.sleep(0)

    pool.failure_rate = 0.0
    pool.healthy = True
    pool.capacity = 1000
    q.wake()
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)

    assert len(tasks) > 2000, outcomes
    assert pool.inflight == 0 and q.depth == 0
    assert all(lease.releases == 1 for lease in pool.leases)
    cancelled = outcomes["cancelled_waiting"] + outcomes["cancelled_serving"]
    assert cancelled == sum(1 for t in tasks if t.cancelled())
    shed = sum(
        outcomes[r] for r in ("queue_full", "deadline", "tenant_over_share", "queue_timeout", "no_backend")
    )
    assert outcomes["served"] + cancelled + shed == len(tasks)
    # (a request shed and cancelled in the same tick counts as shed in the queue's counters)
    assert q.counters.cancelled <= outcomes["cancelled_waiting"]
    # A lease granted in the same tick as its task was cancelled goes back unused via the queue.
    returned = sum(1 for lease in pool.leases if lease.returned_unused)
    assert len(pool.leases) == outcomes["served"] + outcomes["cancelled_serving"] + returned
    # Every path was exercised.
    assert returned > 0 and outcomes["cancelled_waiting"] > returned
    assert outcomes["served"] > 500 and outcomes["cancelled_serving"] > 0
    for reason in ("queue_timeout", "deadline", "no_backend", "tenant_over_share"):
        assert outcomes[reason] > 0, (reason, outcomes)
