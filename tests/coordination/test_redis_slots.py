"""RedisSlots against a real redis-server: the limit holds under concurrency, leases lapse after
their holder dies, renewal keeps them and restores lost ones, and tenants are counted."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest
from redis.asyncio import Redis

from gateway.coordination.connection import connect
from gateway.coordination.redis_slots import RedisSlots
from gateway.coordination.scripts import Keys
from gateway.coordination.shared import SharedState
from tests.procs import ROOT
from tests.redis_server import RedisServer


def worker(url: str, keys: Keys, *args: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "tests.coordination.lease_worker", url, keys.namespace, *args]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)


async def test_acquire_stops_at_the_limit_and_release_frees(redis: Redis, keys: Keys) -> None:
    slots = RedisSlots(redis, "p1", keys=keys)
    leases = [await slots.try_acquire("b", "t", 3) for _ in range(4)]
    assert [lease is not None for lease in leases] == [True, True, True, False]
    assert slots.held("b") == 3
    assert await slots.try_acquire("other", "t", 3) is not None  # limits are per backend
    first = leases[0]
    assert first is not None
    await slots.release(first)
    assert await slots.try_acquire("b", "t", 3) is not None
    with pytest.raises(RuntimeError, match="released twice"):
        await slots.release(first)


async def test_many_coroutines_over_many_connections_never_exceed_the_limit(
    redis_server: RedisServer, keys: Keys
) -> None:
    clients = [connect(redis_server.url, timeout=5.0) for _ in range(6)]
    limit, holding, highest, granted = 5, 0, 0, 0
    full = asyncio.Event()
    """Set once `limit` leases are held at the same time: until then every holder keeps its lease,
    so reaching the limit does not depend on how the scheduler interleaves short holds."""

    async def one(slots: RedisSlots) -> None:
        nonlocal holding, highest, granted
        for _ in range(40):
            lease = await slots.try_acquire("b", "t", limit)
            if lease is None:
                await asyncio.sleep(0)
                continue
            holding += 1
            granted += 1
            highest = max(highest, holding)
            if holding == limit:
                full.set()
            if not full.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(full.wait(), 5.0)
            await asyncio.sleep(0)  # hold across a scheduling point, so holds overlap
            holding -= 1
            await slots.release(lease)

    try:
        await asyncio.gather(
            *(one(RedisSlots(c, f"p{i}-{j}", keys=keys)) for i, c in enumerate(clients) for j in range(8))
        )
        view = await SharedState(clients[0], keys=keys, clock=time.monotonic).read("b")
    finally:
        for c in clients:
            await c.aclose()
    assert highest == limit  # reached, never passed
    assert granted > limit
    assert view.inflight == 0 and view.tenants == {}
    assert view.released == granted


def test_processes_racing_for_slots_never_exceed_the_limit(redis_server: RedisServer, keys: Keys) -> None:
    procs = [worker(redis_server.url, keys, "churn", "4", "60") for _ in range(4)]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    stats = [dict(kv.split("=") for kv in out.split()) for out in outputs]
    assert max(int(s["max"]) for s in stats) <= 4
    assert sum(int(s["granted"]) for s in stats) > 4 * 4


async def test_leases_of_a_killed_process_lapse_after_the_lease_time(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    holder = worker(redis_server.url, keys, "hold", "3", "1.0")
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        slots = RedisSlots(redis, "survivor", keys=keys)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(5)
        killed_at = time.monotonic()
        assert await slots.try_acquire("b", "t", 3) is None  # its leases still count
        lease = None
        while lease is None and time.monotonic() - killed_at < 5.0:
            await asyncio.sleep(0.05)
            lease = await slots.try_acquire("b", "t", 3)
        assert lease is not None, "slots of a SIGKILLed holder did not come back"
        assert time.monotonic() - killed_at < 1.0 + 1.0  # lease time plus one renewal period and slack
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(5)


async def test_renewal_keeps_leases_past_their_lease_time_in_one_call(redis: Redis, keys: Keys) -> None:
    slots = RedisSlots(redis, "p", keys=keys, lease_seconds=0.3)
    other = RedisSlots(redis, "q", keys=keys, lease_seconds=0.3)
    for backend in ("b1", "b2"):
        assert await slots.try_acquire(backend, "t", 1) is not None
    for _ in range(6):  # 0.6 s: twice the lease time
        await asyncio.sleep(0.1)
        renewal = await slots.renew()
        assert renewal.restored == 0
    assert await other.try_acquire("b1", "t", 1) is None
    assert await other.try_acquire("b2", "t", 1) is None
    assert (await other.renew()).replicas == 2


async def test_renewal_puts_back_leases_redis_lost(redis: Redis, keys: Keys) -> None:
    slots = RedisSlots(redis, "p", keys=keys)
    lease = await slots.try_acquire("b", "alice", 2)
    assert lease is not None
    await redis.delete(*keys.lease_keys("b"))  # as after a restart without persistence
    renewal = await slots.renew()
    assert renewal.restored == 1
    view = await SharedState(redis, keys=keys, clock=time.monotonic).read("b")
    assert view.inflight == 1 and view.tenants == {"alice": 1}


async def test_tenants_are_counted_across_processes_and_lapsed_leases_leave_the_count(
    redis: Redis, keys: Keys
) -> None:
    a = RedisSlots(redis, "a", keys=keys, lease_seconds=0.2)
    b = RedisSlots(redis, "b", keys=keys)
    for _ in range(2):
        assert await a.try_acquire("x", "alice", 10) is not None
    kept = await b.try_acquire("x", "bob", 10)
    assert kept is not None
    shared = SharedState(redis, keys=keys, clock=time.monotonic)
    assert (await shared.read("x")).tenants == {"alice": 2, "bob": 1}
    await asyncio.sleep(0.3)  # a never renews: its two leases lapse
    view = await shared.read("x")
    assert view.tenants == {"bob": 1} and view.inflight == 1
    await b.release(kept)
    assert (await shared.read("x")).tenants == {}


async def test_a_widened_lease_counts_its_sequences_until_released(redis: Redis, keys: Keys) -> None:
    """A request of n sequences holds n of the shared limit, in Redis and in what renewals keep."""
    slots = RedisSlots(redis, "p1", keys=keys)
    other = RedisSlots(redis, "p2", keys=keys)
    lease = await slots.try_acquire("b", "t", 4)
    assert lease is not None
    wide = slots.widen(lease, 3)
    await slots.put(wide)
    assert slots.held("b") == 3
    view = await SharedState(redis, keys=keys, clock=time.monotonic).read("b")
    assert view.inflight == 3 and view.tenants == {"t": 3}
    assert await other.try_acquire("b", "u", 4) is not None  # the fourth place
    assert await other.try_acquire("b", "u", 4) is None
    await redis.delete(keys.slots("b"), keys.lease_tenant("b"), keys.tenants("b"))
    assert (await slots.renew()).restored == 3  # every sequence put back, not one
    await other.renew()
    await slots.release(wide)
    view = await SharedState(redis, keys=keys, clock=time.monotonic).read("b")
    assert view.inflight == 1 and view.tenants == {"u": 1}
