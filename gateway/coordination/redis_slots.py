"""Slots as leases in Redis, shared by every process and replica that names the same Redis.

`try_acquire` is one script call (ACQUIRE in scripts.py): purge lapsed leases, count, insert only
below the limit (ACQUIRE_FAIR: and within the tenant's weighted share while others wait); `release`
is one call (RELEASE), which also announces the free slot on the backend's channel. `renew` extends
all of this process's leases on every backend, and its heartbeat, in one call (RENEW), and puts back
any lease Redis lost while its request still runs. A lease lives `lease_seconds` past its last
renewal, so a process killed with SIGKILL frees its slots within that time; renew every
`lease_seconds / 3` (as a ZooKeeper session or a Kubernetes Lease is renewed well inside its term)
so one late or failed renewal does not lose a live lease. `widen` makes a granted lease count the
sequences of the request that took it (gateway.coordination.shared_slots): at once here, where
renewals and the fallback's share read it, and in Redis with `put` (WIDEN).

This class raises what the client raises (redis.exceptions.RedisError, OSError) and keeps no
opinion on failures: the coordinator decides what an unreachable Redis means.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from redis.asyncio import Redis

from gateway.coordination.scripts import ACQUIRE, ACQUIRE_FAIR, RELEASE, RENEW, WIDEN, Keys
from gateway.coordination.shared_slots import SharedSlot


@dataclass(frozen=True, slots=True)
class Renewal:
    replicas: int
    """Processes with a live heartbeat, this one included."""
    restored: int
    """Lease members (sequences) Redis had lost and this renewal put back."""


class RedisSlots:
    def __init__(
        self,
        redis: Redis,
        owner: str,
        *,
        keys: Keys | None = None,
        lease_seconds: float = 10.0,
    ) -> None:
        if not lease_seconds > 0:
            raise ValueError(f"lease_seconds must be > 0, got {lease_seconds!r}")
        self._redis = redis
        self.owner = owner
        self._keys = keys or Keys()
        self._lease_ms = max(1, round(lease_seconds * 1000))
        self._seq = itertools.count(1)
        self._held: dict[str, dict[str, SharedSlot]] = {}
        self.limits: dict[str, int] = {}
        """The limit each backend's last acquire was judged against (the published one, if any)."""
        self._acquire = redis.register_script(ACQUIRE)
        self._acquire_fair = redis.register_script(ACQUIRE_FAIR)
        self._release = redis.register_script(RELEASE)
        self._renew = redis.register_script(RENEW)
        self._widen = redis.register_script(WIDEN)

    @property
    def lease_seconds(self) -> float:
        return self._lease_ms / 1000

    def _new(self, backend: str, tenant: str) -> SharedSlot:
        return SharedSlot(backend, f"{self.owner}#{next(self._seq)}", tenant)

    async def try_acquire(self, backend: str, tenant: str, limit: int) -> SharedSlot | None:
        lease = self._new(backend, tenant)
        granted, _held, shared_limit = await self._acquire(
            keys=self._keys.lease_keys(backend), args=[lease.id, limit, self._lease_ms, tenant]
        )
        self.limits[backend] = int(shared_limit)
        if not granted:
            return None
        self._held.setdefault(backend, {})[lease.id] = lease
        return lease

    async def try_acquire_fair(
        self, backend: str, tenant: str, limit: int, *, weight: float, waiting_seconds: float
    ) -> SharedSlot | None:
        """`try_acquire`, refused also while `tenant` holds its weighted share of the limit and
        another tenant waiting anywhere holds less than its own (ACQUIRE_FAIR); the attempt marks
        `tenant` as waiting for `waiting_seconds`."""
        lease = self._new(backend, tenant)
        keys = [*self._keys.lease_keys(backend), self._keys.waiting(backend), self._keys.weights(backend)]
        args: list[str | int | float] = [
            lease.id,
            limit,
            self._lease_ms,
            tenant,
            weight,
            max(1, round(waiting_seconds * 1000)),
        ]
        granted, _held, shared_limit, _over_share = await self._acquire_fair(keys=keys, args=args)
        self.limits[backend] = int(shared_limit)
        if not granted:
            return None
        self._held.setdefault(backend, {})[lease.id] = lease
        return lease

    def grant_local(self, backend: str, tenant: str) -> SharedSlot:
        """A lease granted without asking Redis (the fallback decided there is room); the next
        successful renewal puts it into Redis."""
        lease = self._new(backend, tenant)
        self._held.setdefault(backend, {})[lease.id] = lease
        return lease

    def forget(self, lease: SharedSlot) -> None:
        """Stop holding `lease` here without telling Redis, where it lapses on its own."""
        held = self._held.get(lease.backend)
        if held is None or held.pop(lease.id, None) is None:
            raise RuntimeError(f"lease {lease.id} released twice or never granted here")

    def widen(self, lease: SharedSlot, weight: int) -> SharedSlot:
        """`lease` counting `weight` sequences from now on here (renewals put every member back);
        `put` tells Redis. The lease held before is replaced: release the one returned."""
        held = self._held.get(lease.backend)
        if held is None or lease.id not in held:
            raise RuntimeError(f"lease {lease.id} is not held here")
        wide = replace(lease, weight=max(lease.weight, weight))
        held[lease.id] = wide
        return wide

    async def put(self, lease: SharedSlot) -> None:
        """Add the lease's members missing from Redis (after `widen`), without a limit check."""
        keys = self._keys.lease_keys(lease.backend)[:3]
        await self._widen(keys=keys, args=[self._lease_ms, lease.tenant, *lease.members()])

    async def release(self, *leases: SharedSlot) -> None:
        """Forget the leases here first, so a failed call still releases each exactly once: Redis
        drops them when they lapse, and no renewal will put them back. One call per backend."""
        by_backend: dict[str, list[SharedSlot]] = {}
        for lease in leases:
            self.forget(lease)
            by_backend.setdefault(lease.backend, []).append(lease)
        for backend, group in by_backend.items():
            members = [member for lease in group for member in lease.members()]
            await self._release(
                keys=self._keys.lease_keys(backend),
                args=[self._keys.released_channel(backend), len(group), *members],
            )

    def held(self, backend: str) -> int:
        """Sequences this process's leases count on `backend`."""
        return sum(lease.weight for lease in self._held.get(backend, {}).values())

    def leases(self) -> list[SharedSlot]:
        return [lease for held in self._held.values() for lease in held.values()]

    async def renew(self) -> Renewal:
        keys = [self._keys.replicas()]
        args: list[str | int] = [self.owner, self._lease_ms, self._lease_ms]
        for backend, held in self._held.items():
            if not held:
                continue
            keys += [self._keys.slots(backend), self._keys.lease_tenant(backend), self._keys.tenants(backend)]
            args.append(sum(lease.weight for lease in held.values()))
            for lease in held.values():
                for member in lease.members():
                    args += [member, lease.tenant]
        replicas, restored = await self._renew(keys=keys, args=args)
        return Renewal(int(replicas), int(restored))
