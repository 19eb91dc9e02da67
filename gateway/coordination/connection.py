"""Opens the asyncio Redis client for `state.redis_url` (see url.py for the forms).

Client: redis-py's asyncio API (`redis.asyncio`). It is the client Redis itself maintains, it
speaks RESP2/3, TLS and Sentinel (re-asking the sentinels for the master after a failover), it
ships type hints, and it parses replies with hiredis, a dependency here (its Python parser costs
more CPU and doubles an acquire's P99: docs/benchmarks.md). Its timeouts cost a task per command
on Python 3.11 (`asyncio.wait_for`), not on 3.12 and later. `coredis` is also typed
and fast but has one main maintainer; `valkey` is a fork of the same code.

Every command has a short timeout (`timeout`, default 0.5 s): a Redis that does not answer must
put the gateway into its local fallback quickly, not hold requests for the TCP timeout. A timeout
is not retried (the fallback decides what it means); a broken connection is retried once on a new
one, which is what a pooled connection finds first after Redis restarted. That retry is safe: a
script that ran before the connection broke at worst leaves one lease nobody holds, which lapses
within `lease_seconds` and errs towards admitting less.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.coordination.url import DirectTarget, RedisTarget, parse_redis_url


def connect(url: str | RedisTarget, *, timeout: float = 0.5) -> Redis:
    """A client for the Redis `url` names. No I/O happens until the first command."""
    target = parse_redis_url(url) if isinstance(url, str) else url
    options: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry_on_timeout": False,
        "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        "decode_responses": True,
        "health_check_interval": 0,
    }
    if isinstance(target, DirectTarget):
        return Redis.from_url(target.url, **options)
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels),
        sentinel_kwargs={"socket_timeout": timeout, "socket_connect_timeout": timeout, "ssl": target.tls},
        **options,
    )
    client: Redis = sentinel.master_for(
        target.service,
        db=target.db,
        username=target.username,
        password=target.password,
        ssl=target.tls,
    )
    return client
