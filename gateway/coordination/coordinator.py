"""One process's part in the shared state: its slots, its renewals, its elections, its reads.

`CoordinatedSlots` is the `SlotBackend` a limiter admits through when `state.redis_url` is set:
leases in Redis while Redis answers; when a call fails, the fallback's local share (fallback.py),
granted here and put into Redis by the first renewal that gets through. A release while in
fallback only forgets the lease here: Redis drops it when it lapses (at most `lease_seconds` of
over-counting, which errs towards admitting less).

`Coordinator.step()` is the periodic work, run every `lease_seconds / 3` by `run()`:
one renewal (all leases and the heartbeat, one round trip; the probe that ends a fallback), then
per backend one campaign (which also extends a seat already held) and one read of the shared view,
from which the shared drain rate is updated. A process that loses Redis also loses every seat: it
must not act as leader while it cannot fence its writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.coordination.fallback import Fallback
from gateway.coordination.leader import Election, Term
from gateway.coordination.rates import CounterRate
from gateway.coordination.redis_slots import RedisSlots
from gateway.coordination.scripts import Keys
from gateway.coordination.shared import SharedState, SharedView
from gateway.coordination.shared_slots import SharedSlot
from gateway.types import Clock, EngineStats

log = logging.getLogger(__name__)

FAILURES = (RedisError, OSError, asyncio.TimeoutError)
"""What an unreachable, restarting or overloaded Redis raises through the client."""


def make_owner() -> str:
    """A process's identity in Redis: host, pid, and a random part (pids repeat across restarts)."""
    return f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(3)}"


class CoordinatedSlots:
    def __init__(self, slots: RedisSlots, fallback: Fallback) -> None:
        self._slots = slots
        self.fallback = fallback

    async def try_acquire(self, backend: str, tenant: str, limit: int) -> SharedSlot | None:
        if self.fallback.shared:
            try:
                return await self._slots.try_acquire(backend, tenant, limit)
            except FAILURES as exc:
                self.lost(exc)
        return self._local(backend, tenant, limit)

    async def try_acquire_fair(
        self, backend: str, tenant: str, limit: int, *, weight: float, waiting_seconds: float
    ) -> SharedSlot | None:
        """`try_acquire` with the tenants' weighted shares across processes (RedisSlots); in
        fallback, the local share as for `try_acquire` (fairness is then the local queue's)."""
        if self.fallback.shared:
            try:
                return await self._slots.try_acquire_fair(
                    backend, tenant, limit, weight=weight, waiting_seconds=waiting_seconds
                )
            except FAILURES as exc:
                self.lost(exc)
        return self._local(backend, tenant, limit)

    def _local(self, backend: str, tenant: str, limit: int) -> SharedSlot | None:
        share = self.fallback.local_share(self._slots.limits.get(backend, limit))
        if self._slots.held(backend) >= share:
            return None
        return self._slots.grant_local(backend, tenant)

    def widen(self, lease: SharedSlot, weight: int) -> SharedSlot:
        """`lease` counting `weight` sequences (RedisSlots.widen); `put` tells Redis."""
        return self._slots.widen(lease, weight)

    async def put(self, lease: SharedSlot) -> None:
        """Count a widened lease in Redis too; in fallback the first renewal that gets through does."""
        if not self.fallback.shared:
            return
        try:
            await self._slots.put(lease)
        except FAILURES as exc:
            self.lost(exc)

    async def release(self, *leases: SharedSlot) -> None:
        if not self.fallback.shared:
            for lease in leases:
                self._slots.forget(lease)
            return
        try:
            await self._slots.release(*leases)
        except FAILURES as exc:
            self.lost(exc)

    def held(self, backend: str) -> int:
        return self._slots.held(backend)

    def observe(self, view: SharedView) -> None:
        """Remember what a read showed: the live replicas and the published limit, what the
        fallback's share is computed from."""
        self.fallback.contact(view.replicas)
        if view.limit is not None:
            self._slots.limits[view.backend] = view.limit

    async def renew(self) -> bool:
        """Renew every lease and the heartbeat. True while shared state is in use."""
        try:
            renewal = await self._slots.renew()
        except FAILURES as exc:
            self.lost(exc)
            return False
        if self.fallback.contact(renewal.replicas):
            log.warning("shared state via Redis is back; %d running requests re-registered", renewal.restored)
        return True

    def lost(self, exc: BaseException) -> None:
        """Note a failed call to Redis (enters the fallback on the first one)."""
        if self.fallback.lost(f"{type(exc).__name__}: {exc}"):
            log.warning(
                "shared state via Redis lost (%s); admitting up to limit / %d replicas locally",
                self.fallback.reason,
                self.fallback.replicas,
            )


class Coordinator:
    @classmethod
    def open(
        cls,
        url: str,
        backends: Iterable[str],
        *,
        clock: Clock,
        namespace: str = "llm-gateway",
        lease_seconds: float = 10.0,
        timeout: float = 0.5,
    ) -> Coordinator:
        """A coordinator for the Redis at `url` (state.redis_url); it connects on its first step."""
        from gateway.coordination.connection import connect

        return cls(
            connect(url, timeout=timeout),
            backends,
            clock=clock,
            keys=Keys(namespace),
            lease_seconds=lease_seconds,
        )

    def __init__(
        self,
        redis: Redis,
        backends: Iterable[str],
        *,
        clock: Clock,
        owner: str | None = None,
        keys: Keys | None = None,
        lease_seconds: float = 10.0,
    ) -> None:
        self.owner = owner or make_owner()
        self.backends = tuple(backends)
        self.period = lease_seconds / 3
        self._redis = redis
        self.keys = keys or Keys()
        self.slots = CoordinatedSlots(
            RedisSlots(redis, self.owner, keys=keys, lease_seconds=lease_seconds), Fallback(clock=clock)
        )
        self._election = Election(redis, self.owner, keys=keys, ttl=lease_seconds)
        self._shared = SharedState(redis, keys=keys, clock=clock)
        self._clock = clock
        self.terms: dict[str, Term] = {}
        self.views: dict[str, SharedView] = {}
        self._drain = {b: CounterRate() for b in self.backends}

    def add(self, backend: str) -> None:
        """Take part in `backend`'s shared state too (a backend added by a reload)."""
        if backend not in self._drain:
            self.backends += (backend,)
            self._drain[backend] = CounterRate()

    @property
    def redis(self) -> Redis:
        """The client (owned here, closed by `close`)."""
        return self._redis

    @property
    def fallback(self) -> Fallback:
        return self.slots.fallback

    async def step(self) -> None:
        if not await self.slots.renew():
            self.terms.clear()
            return
        try:
            for backend in self.backends:
                term = await self._election.campaign(backend)
                if term is None:
                    self.terms.pop(backend, None)
                else:
                    self.terms[backend] = term
                view = await self._shared.read(backend)
                self.views[backend] = view
                self.slots.observe(view)
                self._drain[backend].observe(self._clock(), view.released)
        except FAILURES as exc:
            self.terms.clear()
            self.slots.lost(exc)

    async def read(self, backend: str) -> SharedView | None:
        """Read `backend`'s shared state now (the control tick's fresh look); None in fallback."""
        if not self.fallback.shared:
            return None
        try:
            view = await self._shared.read(backend)
        except FAILURES as exc:
            self.terms.clear()
            self.slots.lost(exc)
            return None
        self.views[backend] = view
        self.slots.observe(view)
        return view

    async def publish(self, backend: str, limit: int, ceiling: int, stats: EngineStats | None = None) -> bool:
        """As leader of `backend`, publish its limit; False when not leading (or no longer)."""
        term = self.terms.get(backend)
        if term is None or not self.fallback.shared:
            return False
        try:
            if await self._shared.publish(term, limit, ceiling, stats):
                return True
        except FAILURES as exc:
            self.slots.lost(exc)
        self.terms.pop(backend, None)
        return False

    def drain_rate(self, backend: str) -> float | None:
        """Requests finished per second on `backend` across every process."""
        return self._drain[backend].rate()

    async def run(self) -> None:
        """Step every `period` until cancelled."""
        while True:
            await self.step()
            await asyncio.sleep(self.period)

    async def close(self) -> None:
        """Resign the seats held, so others take them at once, and close the client (owned here)."""
        for term in list(self.terms.values()):
            with contextlib.suppress(*FAILURES):  # the seat lapses on its own
                await self._election.resign(term)
        self.terms.clear()
        await self._redis.aclose()

    def state(self) -> dict[str, Any]:
        """For /admin/state: whether state is shared, since when, and what this process sees."""
        fb = self.fallback
        return {
            "mode": fb.mode.value,
            "seconds_in_mode": round(fb.seconds_in_mode(), 3),
            "reason": fb.reason,
            "replicas": fb.replicas,
            "owner": self.owner,
            "leading": sorted(self.terms),
            "backends": {
                b: {
                    "held_here": self.slots.held(b),
                    "shared_inflight": v.inflight,
                    "shared_limit": v.limit,
                    "tenants": v.tenants,
                    "drain_rate": self.drain_rate(b),
                }
                for b, v in self.views.items()
            },
        }
