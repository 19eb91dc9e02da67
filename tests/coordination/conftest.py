"""A real Redis server per test module, and a fresh namespace (its own keys) per test."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from gateway.coordination.connection import connect
from gateway.coordination.scripts import Keys
from tests.redis_server import RedisServer, running_redis


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


@pytest.fixture
def keys() -> Keys:
    return Keys(f"test-{secrets.token_hex(4)}")


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = connect(redis_server.url, timeout=5.0)  # a busy test machine is not a Redis outage
    try:
        yield client
    finally:
        await client.aclose()
