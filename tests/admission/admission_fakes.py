"""A stand-in backend pool for the admission queue's tests: counts slots, checks every release."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.admission import AdmissionQueue
from gateway.types import Sample


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
    """`capacity` slots; `failure_rate` makes try_acquire refuse although a slot is free."""

    capacity: int = 0
    healthy: bool = True
    failure_rate: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    inflight: int = 0
    leases: list[FakeLease] = field(default_factory=list)
    queue: AdmissionQueue | None = None

    reserve: int = 0
    """Slots background (batch) leases may not take."""

    def try_acquire(self, model: str, *, background: bool = False) -> FakeLease | None:
        if not self.healthy or self.inflight >= self.capacity - (self.reserve if background else 0):
            return None
        if self.failure_rate and self.rng.random() < self.failure_rate:
            return None
        self.inflight += 1
        lease = FakeLease(f"b{len(self.leases) % 3}", self)
        self.leases.append(lease)
        return lease

    def pick(
        self, model: str, routes: Sequence[object], *, background: bool = False
    ) -> tuple[int, FakeLease] | None:
        lease = self.try_acquire(model, background=background)
        return None if lease is None else (0, lease)

    def available(self, model: str) -> bool:
        return self.healthy

    def open(self, slots: int = 1) -> None:
        """Capacity grows (a limit rises): the pool wakes the queue as the real one does."""
        self.capacity += slots
        if self.queue is not None:
            self.queue.wake()
