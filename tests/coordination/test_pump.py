"""The slot pump against a real redis-server: two "processes" (coordinators with their own clients)
share one backend of limit 1. A lease goes to a waiting request inside `hand_out` or back to Redis
at once; the other process is refused until a release, which its listener hears."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from gateway.coordination.connection import connect
from gateway.coordination.coordinator import Coordinator
from gateway.coordination.pump import SlotPump
from gateway.coordination.scripts import Keys
from gateway.coordination.shared_slots import SharedSlot
from gateway.coordination.wakeups import ReleaseListener
from tests.redis_server import RedisServer


class Waiting:
    """A queue of tenants' requests; `hand_out` gives each ready lease to the next, if it takes it."""

    def __init__(self, pump: SlotPump | None = None) -> None:
        self.pump = pump
        self.tenants: list[str] = []
        self.served: list[SharedSlot] = []
        self.taking = True
        self.served_elsewhere = False
        self.sequences = 1
        """Sequences of each waiting request (OpenAI's `n`)."""

    def next_tenant(self) -> str | None:
        return self.tenants[0] if self.tenants else None

    def room(self) -> int:
        return 8

    def hand_out(self) -> None:
        assert self.pump is not None
        if self.served_elsewhere:  # another backend's pump gave the waiter its slot first
            self.tenants.clear()
        while self.taking and self.tenants and (lease := self.pump.take(self.sequences)) is not None:
            self.tenants.pop(0)
            self.served.append(lease)


def process(
    redis_server: RedisServer, keys: Keys, owner: str, limit: int = 1
) -> tuple[Coordinator, SlotPump, Waiting]:
    c = Coordinator(
        connect(redis_server.url, timeout=5.0), ["b"], clock=time.monotonic, owner=owner, keys=keys
    )
    waiting = Waiting()
    pump = SlotPump("b", c.slots, waiting, limit=lambda: limit, weight=lambda t: 1.0, poll=5.0)
    waiting.pump = pump
    return c, pump, waiting


@pytest.fixture
async def two(
    redis_server: RedisServer, keys: Keys
) -> AsyncIterator[list[tuple[Coordinator, SlotPump, Waiting]]]:
    procs = [process(redis_server, keys, "p1"), process(redis_server, keys, "p2")]
    for c, _, _ in procs:
        await c.step()
    yield procs
    for c, _, _ in procs:
        await c.close()


async def test_a_lease_goes_to_a_waiter_and_the_other_process_waits_for_its_release(
    two: list[tuple[Coordinator, SlotPump, Waiting]], keys: Keys
) -> None:
    (c1, pump1, wait1), (c2, pump2, wait2) = two
    heard = asyncio.Event()
    listener = ReleaseListener(c2.redis, ["b"], lambda backend: heard.set(), keys=keys)
    listening = asyncio.create_task(listener.run())
    try:
        wait1.tenants.append("t")
        assert await pump1.fill() == 1 and len(wait1.served) == 1
        wait2.tenants.append("t")
        assert await pump2.fill() == 0 and pump2.counts.refused == 1  # the limit is held elsewhere
        channel = keys.released_channel("b")
        while (await c1.redis.pubsub_numsub(channel))[0][1] == 0:  # noqa: ASYNC110 - subscribed first
            await asyncio.sleep(0.01)
        pump1.give_back(wait1.served.pop())
        await pump1.flush()
        await asyncio.wait_for(heard.wait(), 5.0)  # announced to the other process
        assert await pump2.fill() == 1 and len(wait2.served) == 1
        await c1.step()
        assert c1.views["b"].inflight == 1
    finally:
        listening.cancel()


async def test_a_lease_nobody_takes_goes_back_at_once(
    two: list[tuple[Coordinator, SlotPump, Waiting]],
) -> None:
    (c1, pump1, wait1), _ = two
    wait1.tenants.append("t")
    wait1.taking = False  # the waiter went away between the ask and the grant
    assert await pump1.fill() == 0
    assert pump1.counts.unused == 1 and pump1.ready == [] and c1.slots.held("b") == 0
    assert pump1.stalled  # the waiter is still there: asking again at once would loop
    await c1.step()
    assert c1.views["b"].inflight == 0


async def test_a_lease_another_backend_served_first_does_not_stall_the_pump(
    two: list[tuple[Coordinator, SlotPump, Waiting]],
) -> None:
    (c1, pump1, wait1), _ = two
    wait1.tenants.append("t")
    wait1.served_elsewhere = True
    assert await pump1.fill() == 0
    assert pump1.counts.unused == 1 and c1.slots.held("b") == 0
    assert not pump1.stalled  # nothing waits: the next request wakes it at once


async def test_a_request_of_n_sequences_holds_n_places_in_every_process(
    redis_server: RedisServer, keys: Keys
) -> None:
    """Limit 3 shared by two processes: a request with `n` = 3 taking a lease in one leaves no place
    in the other until it ends, as the local count leaves none in its own process."""
    procs = [process(redis_server, keys, "p1", limit=3), process(redis_server, keys, "p2", limit=3)]
    (c1, pump1, wait1), (c2, pump2, wait2) = procs
    try:
        for c, _, _ in procs:
            await c.step()
        wait1.sequences = 3
        wait1.tenants.append("t")
        assert await pump1.fill() == 1
        (lease,) = wait1.served
        assert lease.weight == 3 and c1.slots.held("b") == 3
        await pump1.flush()  # the widening reaches Redis before anything else this pump sends
        wait2.tenants.append("u")
        assert await pump2.fill() == 0 and pump2.counts.refused == 1
        await c2.step()
        assert c2.views["b"].inflight == 3
        pump1.give_back(wait1.served.pop())
        await pump1.flush()
        assert await pump2.fill() == 1 and len(wait2.served) == 1
        await c2.step()
        assert c2.views["b"].inflight == 1 and c1.slots.held("b") == 0
    finally:
        for c, _, _ in procs:
            await c.close()


async def test_requests_that_end_together_are_released_in_one_call_and_all_counted(
    redis_server: RedisServer, keys: Keys
) -> None:
    c, pump, waiting = process(redis_server, keys, "p1", limit=3)
    await c.step()
    try:
        pubsub = c.redis.pubsub()
        await pubsub.subscribe(keys.released_channel("b"))
        confirmed = await pubsub.get_message(timeout=5.0)
        assert confirmed is not None and confirmed["type"] == "subscribe"
        waiting.tenants += ["t", "t", "t"]
        assert await pump.fill() == 3
        for lease in waiting.served:
            pump.give_back(lease)
        await pump.flush()
        assert await c.redis.zcard(keys.slots("b")) == 0 and c.slots.held("b") == 0
        assert await c.redis.hget(keys.state("b"), "released") == "3"
        assert pump.counts.released == 3
        messages = []
        while (message := await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)) is not None:
            messages.append(message)
        assert len(messages) == 1  # one announcement for the three: one call carried them
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    finally:
        await c.close()
