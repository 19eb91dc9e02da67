"""The interactive waiters of one model's queue: fair order, a heap of deadlines, one expiry timer.

Waiters are kept in a `FairQueue` (priority, then weighted fairness between tenants, then FIFO). Their
deadlines are kept apart in a heap, so the earliest is found in O(1) and the overdue in O(log n)
each; an entry of a waiter that left the queue another way stays in the heap until it reaches the
top (no search to remove it), and the heap is rebuilt once such entries outnumber the live ones.

Expiry uses one loop timer, armed for the earliest deadline: one handle instead of one per waiter.
The timer only says when to look; every expiry decision is taken against the injected clock, so
tests drive expiry by advancing a fake clock and calling the queue's `wake()`.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic

from gateway.admission.fairness import Entry, FairQueue, Pricing
from gateway.admission.ticket import L, Ticket


@dataclass(eq=False, slots=True)
class Waiter(Generic[L]):
    ticket: Ticket
    future: asyncio.Future[L]
    enqueued_at: float
    deadline: float
    entry: Entry[Waiter[L]] | None = None
    """Set while queued; None once dispatched or removed."""
    passed: int = 0
    """Times a waiter behind it in its lane was given a slot first."""


class Waiters(Generic[L]):
    def __init__(self, tenant_weights: Mapping[str, float] | None, pricing: Pricing | None = None) -> None:
        self.fair: FairQueue[Waiter[L]] = FairQueue(tenant_weights, pricing=pricing)
        self._deadlines: list[tuple[float, int, Waiter[L]]] = []

    @property
    def depth(self) -> int:
        return self.fair.depth

    def push(
        self,
        ticket: Ticket,
        future: asyncio.Future[L],
        now: float,
        deadline: float,
        rank: int | None = None,
    ) -> Waiter[L]:
        """Queue a waiter in priority class `rank` (gateway.admission.budget.rank; by default its
        ticket's priority)."""
        waiter = Waiter(ticket, future, now, deadline)
        waiter.entry = self.fair.push(
            waiter, ticket.tenant, ticket.priority if rank is None else rank, ticket.prompt_tokens
        )
        heapq.heappush(self._deadlines, (deadline, waiter.entry.seq, waiter))
        return waiter

    def pop(self, entry: Entry[Waiter[L]]) -> Waiter[L]:
        """Take `entry` out to be dispatched (the fair queue charges its tenant for it)."""
        self.fair.pop(entry)
        entry.item.entry = None
        return entry.item

    def remove(self, waiter: Waiter[L]) -> None:
        """Take a waiter out without dispatching it (cancelled, expired, shed)."""
        if waiter.entry is not None:
            self.fair.remove(waiter.entry)
            waiter.entry = None

    def earliest_deadline(self) -> float | None:
        """The earliest deadline in the heap (possibly of a waiter gone already: a lower bound)."""
        return self._deadlines[0][0] if self._deadlines else None

    def overdue(self, now: float) -> Iterator[Waiter[L]]:
        """Remove and yield, one at a time, each waiter whose deadline is past."""
        heap = self._deadlines
        while heap and (heap[0][2].entry is None or heap[0][0] <= now):
            _, _, waiter = heapq.heappop(heap)
            if waiter.entry is None:
                continue
            self.remove(waiter)
            yield waiter
        if len(heap) > 2 * self.fair.depth + 64:
            self._deadlines = [d for d in heap if d[2].entry is not None]
            heapq.heapify(self._deadlines)

    def forget_deadlines(self) -> None:
        self._deadlines.clear()


class ExpiryTimer:
    """One loop timer, armed for the earliest deadline it was told of; calls `on_fire` then."""

    def __init__(self, on_fire: Callable[[], None]) -> None:
        self._on_fire = on_fire
        self._handle: asyncio.TimerHandle | None = None
        self._deadline = 0.0

    def arm(self, deadline: float, now: float) -> None:
        """Fire at `deadline` (clock seconds, `now` being the clock's time) unless armed sooner."""
        if self._handle is not None and self._deadline <= deadline:
            return
        if self._handle is not None:
            self._handle.cancel()
        loop = asyncio.get_running_loop()
        self._deadline = deadline
        self._handle = loop.call_at(loop.time() + max(0.0, deadline - now), self._fire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        self._on_fire()
