"""The coordinator against a real redis-server that is stopped, frozen and started again:
requests keep being admitted at the local share, never unlimited, and the shared state is rebuilt
(running requests counted again, a leader elected) when Redis answers again."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from gateway.coordination.connection import connect
from gateway.coordination.coordinator import Coordinator
from gateway.coordination.fallback import Mode
from gateway.coordination.scripts import Keys
from gateway.coordination.shared_slots import SharedSlot
from tests.redis_server import RedisServer, running_redis


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


def coordinator(server: RedisServer, owner: str, timeout: float = 2.0) -> Coordinator:
    return Coordinator(
        connect(server.url, timeout=timeout),
        ["x"],
        clock=time.monotonic,
        owner=owner,
        keys=Keys("coord"),
        lease_seconds=3.0,
    )


async def take(c: Coordinator, n: int, limit: int = 100) -> list[SharedSlot]:
    granted = [await c.slots.try_acquire("x", c.owner, limit) for _ in range(n)]
    return [lease for lease in granted if lease is not None]


async def test_redis_stopped_and_started_again(server: RedisServer) -> None:
    a, b = coordinator(server, "a"), coordinator(server, "b")
    await a.step()
    await b.step()
    assert a.fallback.shared and b.fallback.shared
    assert sorted(a.terms) == ["x"] and b.terms == {}  # one leader
    assert await a.publish("x", 6, 32) and not await b.publish("x", 9, 32)
    await b.step()
    await a.step()
    assert b.views["x"].limit == 6 and a.views["x"].replicas == 2
    a_leases, b_leases = await take(a, 2), await take(b, 1)
    assert len(a_leases) == 2 and len(b_leases) == 1

    server.stop()
    # Each process now admits up to 6 // 2 = 3, counting what it already holds.
    a_leases += await take(a, 5)
    b_leases += await take(b, 5)
    assert (a.slots.held("x"), b.slots.held("x")) == (3, 3)
    assert a.fallback.mode is Mode.FALLBACK and "Error" in a.fallback.reason
    await a.step()
    assert a.terms == {} and not await a.publish("x", 6, 32)
    await b.slots.release(b_leases.pop())  # finished while Redis was away

    server.start()  # empty: every key was lost
    await a.step()
    await b.step()
    assert a.fallback.shared and b.fallback.shared and a.fallback.losses == 1
    await a.step()
    view = a.views["x"]
    assert view.inflight == 3 + 2  # the running requests, re-registered
    assert view.tenants == {"a": 3, "b": 2}
    assert len(a.terms) + len(b.terms) == 1  # a leader again
    for lease in a_leases:
        await a.slots.release(lease)
    for lease in b_leases:
        await b.slots.release(lease)
    await a.step()
    assert a.views["x"].inflight == 0
    state = a.state()
    assert state["mode"] == "shared" and state["backends"]["x"]["held_here"] == 0
    leader, follower = (a, b) if a.terms else (b, a)
    await leader.close()  # resigns: the other takes the seat at its next step
    await follower.step()
    assert sorted(follower.terms) == ["x"]
    await follower.close()


async def test_a_frozen_redis_is_a_timeout_and_the_fallback_admits_at_once(server: RedisServer) -> None:
    a = coordinator(server, "a", timeout=1.0)
    await a.step()
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        leases = await take(a, 3, limit=2)
        waited = time.monotonic() - started
        assert len(leases) == 2 and a.fallback.mode is Mode.FALLBACK
        assert "Timeout" in a.fallback.reason
        assert waited < 3 * 1.0  # one command timeout, then local decisions (not one per request)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    await a.step()
    assert a.fallback.shared
    await a.step()
    assert a.views["x"].inflight == 2
    await a.close()
