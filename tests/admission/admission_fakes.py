"""A stand-in backend pool for the admission queue's tests (counts slots, checks every release),
and the queue set-up they share."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.admission import AdmissionQueue
from gateway.types import Sample
from tests.clock import FakeClock


@dataclass(eq=False)
class FakeLease:
    backend: str
    pool: FakePool
    releases: int = 0
    returned_unused: bool = False
    """Released without a sample: handed back by the queue, never used."""

    def release(self, sample: Sample | None) -> None:
        self.releases += 1
        self.returned_unused = sample is None
        assert self.releases == 1, "lease released twice"
        self.pool.inflight -= 1
        if self.pool.queue is not None:
            self.pool.queue.wake()


@dataclass(eq=False)
class FakePool:
    """`capacity` slots shared by the backends `names` (taken in turn); `failure_rate` makes a pick
    refuse although a slot is free."""

    capacity: int = 0
    healthy: bool = True
    failure_rate: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    inflight: int = 0
    leases: list[FakeLease] = field(default_factory=list)
    queue: AdmissionQueue[FakeLease] | None = None
    names: tuple[str, ...] = ("b0", "b1", "b2")

    reserve: int = 0
    """Slots background (batch) leases may not take."""

    def pick(
        self,
        model: str,
        routes: Sequence[object],
        *,
        exclude: Collection[str] = (),
        background: bool = False,
    ) -> tuple[int, FakeLease] | None:
        names = [n for n in self.names if n not in exclude]
        if not names or not self.has_room(model, background=background):
            return None
        if self.failure_rate and self.rng.random() < self.failure_rate:
            return None
        self.inflight += 1
        lease = FakeLease(names[len(self.leases) % len(names)], self)
        self.leases.append(lease)
        return 0, lease

    def available(self, model: str, *, exclude: Collection[str] = ()) -> bool:
        return self.healthy and any(n not in exclude for n in self.names)

    def has_room(self, model: str, *, background: bool = False) -> bool:
        return self.healthy and self.inflight < self.capacity - (self.reserve if background else 0)

    def open(self, slots: int = 1) -> None:
        """Capacity grows (a limit rises): the pool wakes the queue as the real one does."""
        self.capacity += slots
        if self.queue is not None:
            self.queue.wake()


def make_queue(
    capacity: int = 0, *, pool: FakePool | None = None, clock: FakeClock | None = None, **kw: Any
) -> tuple[AdmissionQueue[FakeLease], FakePool, FakeClock]:
    """Model "m"'s queue over a `FakePool` that wakes it, on a fake clock at 1000 s: 100 places and
    a 30 s timeout unless `kw` says otherwise."""
    pool = pool if pool is not None else FakePool(capacity=capacity)
    clock = clock if clock is not None else FakeClock(1000.0)
    kw.setdefault("max_depth", 100)
    kw.setdefault("timeout", 30.0)
    q: AdmissionQueue[FakeLease] = AdmissionQueue("m", pool, clock=clock, **kw)
    pool.queue = q
    return q, pool, clock


async def settle() -> None:
    """Let every runnable task take its next step (they enqueue, or resume with a lease)."""
    for _ in range(3):
        await asyncio.sleep(0)
