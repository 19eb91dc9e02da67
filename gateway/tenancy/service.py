"""The tenants' quotas and usage of one gateway, built from its config: what the proxy calls.

Quotas come from `tenants[].tokens_per_minute`, `requests_per_minute` and `max_concurrent`; with
`state.redis_url` they are shared through the coordinator's Redis client (the same connection and
timeouts as the shared slots), and the local share while Redis is down divides by the replicas the
coordinator last counted. Usage goes to `usage.data_dir` (default `batch.data_dir`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.config import GatewayConfig
from gateway.metrics.tenants import TenantMetrics
from gateway.tenancy.buckets import Limits
from gateway.tenancy.gate import QuotaGate
from gateway.tenancy.usage import UsageLedger
from gateway.tenancy.usage_store import UsageStore
from gateway.types import Clock

if TYPE_CHECKING:
    from redis.asyncio import Redis


def tenant_limits(config: GatewayConfig) -> dict[str, Limits]:
    return {
        t.name: Limits(t.tokens_per_minute, t.requests_per_minute, t.max_concurrent)
        for t in config.tenants
        if t.has_quota
    }


class Tenancy:
    def __init__(
        self,
        config: GatewayConfig,
        metrics: TenantMetrics,
        *,
        clock: Clock,
        redis: Redis | None = None,
        replicas: Callable[[], int] = lambda: 1,
        wall: Callable[[], float] = time.time,
    ) -> None:
        shared = None
        if redis is not None:
            from gateway.tenancy.redis_quota import RedisQuotas

            # A running hold outlives its last renewal by the slots' lease (a killed replica's
            # requests stop counting after as long as its slots do).
            shared = RedisQuotas(redis, config.state.namespace, hold_seconds=config.state.lease_seconds)
        self._renew_every = config.state.lease_seconds / 3
        self.gate = QuotaGate(
            tenant_limits(config),
            clock=clock,
            redis=shared,
            replicas=replicas,
            on_share=lambda local: metrics.local_share.set(1 if local else 0),
        )
        data_dir = config.usage.data_dir or config.batch.data_dir
        self.usage = UsageLedger(
            UsageStore(data_dir),
            metrics,
            wall=wall,
            flush_interval=config.usage.flush_interval,
            retention_days=config.usage.retention_days,
        )
        self._tasks: list[asyncio.Task[None]] = []

    def reconfigure(self, config: GatewayConfig) -> None:
        self.gate.reconfigure(tenant_limits(config))

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self.usage.run()), asyncio.create_task(self._renew())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.gate.close()
        await self.usage.close()

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self._renew_every)
            await self.gate.renew()
