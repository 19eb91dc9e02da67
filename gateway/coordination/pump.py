"""Takes shared slots from Redis for the requests waiting in this process, one backend each.

The admission queue and the pool decide synchronously (late binding happens inside one call), while
a shared slot needs a round trip to Redis. The pump bridges the two: while a request waits here for
the backend, it asks Redis for one lease (for the tenant the queue would serve next), puts it in
`ready`, and calls `hand_out()`, in which the queue dispatches synchronously and the pool gives the
ready lease to the request it picks. A lease nobody took in that call (the waiter was cancelled
meanwhile) is released at once, so a lease is never held without a request.

When to ask again, rules and why:
- At once after a grant: more may be waiting.
- After a refusal (the limit is held across processes, or the tenant holds its share while
  another waits), only when woken: a release here (`give_back`), a release in another process
  (its announcement on the backend's pub/sub channel, `nudge()`), new demand here, or the poll.
  Asking on a timer alone would add up to a poll period to every queued request.
- The poll (`poll` seconds, while requests wait) covers an announcement lost with a broken
  subscription and keeps this process's tenants marked as waiting across processes.
- After a lease nobody took while a request still waits (a batch line the pool keeps off the
  backend for now), wait the poll, not a wake-up: its own release would wake the pump at once and
  it would take and return the same slot in a loop. When nothing waits any more (the waiter left,
  or another backend's pump served it first), wait to be woken as usual.

A lease is asked for as one sequence, since which request takes it is decided in `hand_out`; the
request that takes it widens it to its own sequences (`take(sequences)`), as a local slot admits a
request of n while one place is free, so the shared count holds n for it until it ends.

Widenings and releases go out through one task per backend (`take` and `give_back` are
synchronous: the pool's choice and a request's `finally` cannot wait on Redis), in order, so a
lease is widened in Redis before it is released. After releases the task wakes the pump: the slot
a request here just freed is offered to the waiters here and everywhere through the same script,
so no process keeps its slots for itself and the tenants' shares hold across processes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.coordination.shared_slots import SharedSlot


class Demand(Protocol):
    """The waiting side of one backend in this process (the pool and its queues)."""

    def next_tenant(self) -> str | None:
        """The tenant whose request would take this backend's next slot; None when none waits."""

    def room(self) -> int:
        """Slots this process may still fill on the backend (its limit in force less in flight)."""

    def hand_out(self) -> None:
        """Dispatch synchronously: the pool takes leases from `ready` for the requests it picks."""


class FairSlots(Protocol):
    async def try_acquire_fair(
        self, backend: str, tenant: str, limit: int, *, weight: float, waiting_seconds: float
    ) -> SharedSlot | None: ...

    def widen(self, lease: SharedSlot, weight: int) -> SharedSlot: ...

    async def put(self, lease: SharedSlot) -> None: ...

    async def release(self, *leases: SharedSlot) -> None: ...


@dataclass(slots=True)
class PumpCounts:
    """Monotonic counts for /admin/state."""

    granted: int = 0
    refused: int = 0
    unused: int = 0
    """Leases granted while a request waited that no request took (released at once)."""
    released: int = 0
    polls: int = 0


class SlotPump:
    def __init__(
        self,
        backend: str,
        slots: FairSlots,
        demand: Demand,
        *,
        limit: Callable[[], int],
        weight: Callable[[str], float],
        poll: float = 0.5,
    ) -> None:
        if not poll > 0:
            raise ValueError(f"poll must be > 0, got {poll!r}")
        self.backend = backend
        self.ready: list[SharedSlot] = []
        self.counts = PumpCounts()
        self._slots = slots
        self._demand = demand
        self._limit = limit
        self._weight = weight
        self._poll = poll
        self._wake = asyncio.Event()
        self._returns: deque[tuple[bool, SharedSlot]] = deque()
        """Leases to tell Redis about, in order: (True, lease) to release, (False, lease) to widen."""
        self._returning = asyncio.Event()
        self.stalled = False
        """The last fill got a lease a waiting request did not take: wait the poll before asking again."""
        self.full = False
        """Redis refused the last lease asked for (the limit is held across processes, or the
        tenant holds its share): what the capacity-exhausted gauge reports with shared slots."""

    # -- synchronous side (the pool, the request path) ----------------------------------------------

    def take(self, sequences: int = 1) -> SharedSlot | None:
        """A ready lease for the request the pool picked, counting its `sequences`; None outside
        `hand_out`."""
        if not self.ready:
            return None
        lease = self.ready.pop()
        if sequences > lease.weight:
            lease = self._slots.widen(lease, sequences)
            self._returns.append((False, lease))
            self._returning.set()
        return lease

    def give_back(self, lease: SharedSlot) -> None:
        """A request ended: release its lease (through the release task, once, in order)."""
        self._returns.append((True, lease))
        self._returning.set()

    def nudge(self) -> None:
        """A slot may have freed (here or in another process), or a request began to wait."""
        self._wake.set()

    # -- tasks -------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Fill waiting requests with leases until cancelled."""
        while True:
            await self.fill()
            if self.stalled:  # woken, it would take and return the same lease again at once
                await asyncio.sleep(self._poll)
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._poll):
                        await self._wake.wait()
                if not self._wake.is_set() and self._demand.next_tenant() is not None:
                    self.counts.polls += 1
            self._wake.clear()

    async def fill(self) -> int:
        """Ask for leases while requests wait and there is room here; the number handed out."""
        handed = 0
        self.stalled = False
        while self._demand.room() > 0 and (tenant := self._demand.next_tenant()) is not None:
            self._wake.clear()
            lease = await self._slots.try_acquire_fair(
                self.backend,
                tenant,
                self._limit(),
                weight=self._weight(tenant),
                waiting_seconds=2 * self._poll,
            )
            self.full = lease is None
            if lease is None:
                self.counts.refused += 1
                return handed
            self.counts.granted += 1
            self.ready.append(lease)
            try:
                self._demand.hand_out()
            finally:
                unused, self.ready = self.ready, []
            if unused:  # the waiter left, was served elsewhere, or is not placed here (a batch line)
                # Only a waiter still there that would not take it makes asking again at once a loop.
                self.stalled = self._demand.next_tenant() is not None
                self.counts.unused += len(unused)
                await self._release(*unused)
                return handed
            handed += 1
        return handed

    async def run_releases(self) -> None:
        """Send releases to Redis as requests end, until cancelled."""
        while True:
            await self._returning.wait()
            await self.flush()

    async def flush(self) -> None:
        """Widen and release every lease so far, in order: the releases between two widenings in
        one call, so under load a round trip to Redis carries every request that ended during the
        one before."""
        self._returning.clear()
        returns = self._returns
        while returns:
            release, lease = returns.popleft()
            if not release:
                await self._slots.put(lease)
                continue
            leases = [lease]
            while returns and returns[0][0]:
                leases.append(returns.popleft()[1])
            await self._release(*leases)
        self.nudge()

    async def _release(self, *leases: SharedSlot) -> None:
        self.counts.released += len(leases)
        await self._slots.release(*leases)

    def state(self) -> dict[str, int]:
        c = self.counts
        return {
            "granted": c.granted,
            "refused": c.refused,
            "unused": c.unused,
            "released": c.released,
            "polls": c.polls,
            "releasing": len(self._returns),
        }
