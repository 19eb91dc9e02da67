"""The slot interface a limiter admits through, and its in-process implementation.

A slot is one request's hold on a backend. `SlotBackend.try_acquire(backend, tenant, limit)`
grants one while fewer than `limit` are held, atomically with respect to every other caller that
counts against the same backend; `release(lease)` gives it back, exactly once. `LocalSlots` counts
in this process (what one gateway process does today); `RedisSlots` (leases.py) counts across
every process and replica that names the same Redis; `CoordinatedSlots` (coordinator.py) is
`RedisSlots` with the local fallback when Redis cannot be reached.

Why async: a shared count needs a round trip. The in-process one never waits, so awaiting it costs
one coroutine step and no scheduling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class SlotLease:
    """One slot a `SlotBackend` granted, in this process or in Redis. `id` is unique across
    processes: "<owner>#<sequence>"."""

    backend: str
    id: str
    tenant: str


class SlotBackend(Protocol):
    async def try_acquire(self, backend: str, tenant: str, limit: int) -> SlotLease | None:
        """A lease when fewer than `limit` are held for `backend`, else None. Never waits for room."""

    async def release(self, lease: SlotLease) -> None:
        """Give `lease` back. Releasing one twice raises RuntimeError (a bug in the caller)."""

    def held(self, backend: str) -> int:
        """Leases this process holds on `backend` now."""


class LocalSlots:
    """Slots counted in this process only: the gateway's behaviour without shared state."""

    def __init__(self, owner: str = "local") -> None:
        self._owner = owner
        self._seq = 0
        self._held: dict[str, set[str]] = {}

    async def try_acquire(self, backend: str, tenant: str, limit: int) -> SlotLease | None:
        return self.take(backend, tenant, limit)

    def take(self, backend: str, tenant: str, limit: int) -> SlotLease | None:
        """The synchronous form of try_acquire (the fallback uses it while Redis is away)."""
        held = self._held.setdefault(backend, set())
        if len(held) >= limit:
            return None
        self._seq += 1
        lease = SlotLease(backend, f"{self._owner}#{self._seq}", tenant)
        held.add(lease.id)
        return lease

    async def release(self, lease: SlotLease) -> None:
        self.give_back(lease)

    def give_back(self, lease: SlotLease) -> None:
        held = self._held.get(lease.backend)
        if held is None or lease.id not in held:
            raise RuntimeError(f"lease {lease.id} released twice or never granted here")
        held.remove(lease.id)

    def held(self, backend: str) -> int:
        return len(self._held.get(backend, ()))
