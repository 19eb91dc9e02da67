"""Leader election against a real redis-server: one leader per backend, failover when its seat
lapses, and fencing that stops a deposed leader from renewing or publishing."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from gateway.coordination.leader import Election
from gateway.coordination.scripts import Keys
from gateway.coordination.shared import SharedState


async def test_one_leader_per_backend_and_a_campaign_extends_the_seat(redis: Redis, keys: Keys) -> None:
    a = Election(redis, "a", keys=keys, ttl=5)
    b = Election(redis, "b", keys=keys, ttl=5)
    term = await a.campaign("x")
    assert term is not None and term.owner == "a"
    assert await b.campaign("x") is None
    assert await a.campaign("x") == term  # the same term, not a new election
    other = await b.campaign("y")
    assert other is not None and other.owner == "b"


async def test_failover_after_the_leader_stops_renewing(redis: Redis, keys: Keys) -> None:
    a = Election(redis, "a", keys=keys, ttl=0.3)
    b = Election(redis, "b", keys=keys, ttl=0.3)
    first = await a.campaign("x")
    assert first is not None
    assert await b.campaign("x") is None
    successor = None
    deadline = time.monotonic() + 3
    while successor is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        successor = await b.campaign("x")
    assert successor is not None and successor.number > first.number
    # The old leader wakes up: it cannot renew, publish, or take the seat back.
    shared = SharedState(redis, keys=keys, clock=time.monotonic)
    assert await shared.publish(successor, 7, 20, None)
    assert not await a.renew(first)
    assert not await shared.publish(first, 99, 99, None)
    assert await a.campaign("x") is None
    assert (await shared.read("x")).limit == 7


async def test_resign_hands_the_seat_over_at_once(redis: Redis, keys: Keys) -> None:
    a = Election(redis, "a", keys=keys, ttl=30)
    b = Election(redis, "b", keys=keys, ttl=30)
    term = await a.campaign("x")
    assert term is not None
    await b.resign(term.__class__(term.backend, "b", term.number))  # not b's term: no effect
    assert await b.campaign("x") is None
    await a.resign(term)
    assert await a.renew(term) is False
    successor = await b.campaign("x")
    assert successor is not None and successor.number == term.number + 1
