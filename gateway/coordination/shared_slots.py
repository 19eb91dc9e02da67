"""A shared slot: one request's place in a backend's in-flight count across processes, and the
interface that grants them.

`SlotBackend.try_acquire(backend, tenant, limit)` grants one while fewer than `limit` are held,
atomically with respect to every other caller that counts against the same backend;
`release(lease)` gives it back, exactly once. `RedisSlots` (redis_slots.py) counts across every
process and replica that names the same Redis, each slot a lease there; `CoordinatedSlots`
(coordinator.py) is `RedisSlots` with the local fallback when Redis cannot be reached. Without
shared state a backend counts in this process only (gateway.control.slots).

A lease counts the sequences of its request (OpenAI's `n`, several prompts), as the local count
does (gateway.control.slots): one entry in the backend's shared set per sequence, so a request the
engine runs as n sequences holds n of the limit in every process, not one. It is granted as one
(which request takes it is decided after the grant) and widened to its request's sequences when
taken, as a local slot admits a request of n while one place is free.

Why async: a shared count needs a round trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class SharedSlot:
    """One slot a `SlotBackend` granted, a lease in Redis. `id` is unique across processes:
    "<owner>#<sequence>"."""

    backend: str
    id: str
    tenant: str
    weight: int = 1
    """Sequences the lease counts."""

    def members(self) -> list[str]:
        """Its entries in the backend's shared set: the id, then one per further sequence."""
        return [self.id, *(f"{self.id}+{k}" for k in range(1, self.weight))]


class SlotBackend(Protocol):
    async def try_acquire(self, backend: str, tenant: str, limit: int) -> SharedSlot | None:
        """A lease when fewer than `limit` are held for `backend`, else None. Never waits for room."""

    async def release(self, *leases: SharedSlot) -> None:
        """Give `leases` back. Releasing one twice raises RuntimeError (a bug in the caller)."""

    def held(self, backend: str) -> int:
        """Sequences this process's leases count on `backend` now."""
