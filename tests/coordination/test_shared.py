"""SharedState against a real redis-server: what the leader publishes is what every reader sees,
engine stats included, and the published limit bounds every process's acquire."""

from __future__ import annotations

import time

import pytest
from redis.asyncio import Redis

from gateway.coordination.leader import Election
from gateway.coordination.redis_slots import RedisSlots
from gateway.coordination.scripts import Keys
from gateway.coordination.shared import SharedState, decode_engine_stats, encode_engine_stats
from gateway.types import EngineStats


def test_engine_stats_round_trip_without_their_clock_reading() -> None:
    stats = EngineStats(
        at=123.0, kv_usage=0.5, waiting=2, running=8, preemptions_total=3, kv_capacity_tokens=8192
    )
    back = decode_engine_stats(encode_engine_stats(stats), at=7.0)
    assert back is not None and back.at == 7.0
    assert back.kv_usage == 0.5 and back.running == 8 and back.kv_capacity_tokens == 8192
    assert decode_engine_stats(encode_engine_stats(None), at=0.0) is None


async def test_a_published_limit_is_read_everywhere_and_bounds_acquires(redis: Redis, keys: Keys) -> None:
    shared = SharedState(redis, keys=keys, clock=time.monotonic)
    empty = await shared.read("x")
    assert empty.limit is None and empty.engine_stats is None and empty.age is None
    term = await Election(redis, "leader", keys=keys).campaign("x")
    assert term is not None
    stats = EngineStats(at=0.0, kv_usage=0.9, preemptions_total=12)
    assert await shared.publish(term, 2, 16, stats)
    view = await shared.read("x")
    assert (view.limit, view.ceiling, view.term) == (2, 16, term.number)
    assert view.engine_stats is not None and view.engine_stats.preemptions_total == 12
    assert view.age is not None and 0 <= view.age < 1
    follower = RedisSlots(redis, "follower", keys=keys)
    # The follower still believes the limit is 10; the published 2 decides.
    granted = [await follower.try_acquire("x", "t", 10) for _ in range(3)]
    assert [g is not None for g in granted] == [True, True, False]
    assert follower.limits["x"] == 2


@pytest.mark.parametrize("replicas", [1, 3])
async def test_replicas_are_the_processes_with_a_live_heartbeat(
    redis: Redis, keys: Keys, replicas: int
) -> None:
    for i in range(replicas):
        await RedisSlots(redis, f"p{i}", keys=keys).renew()
    assert (await SharedState(redis, keys=keys, clock=time.monotonic).read("x")).replicas == replicas
