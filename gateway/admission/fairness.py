"""Waiting order: strict priority classes, start-time fair queueing of tenants, FIFO per tenant.

Within one priority class each tenant i has a lane (a FIFO) and a weight w_i. Every request costs
one unit of service, so start-time fair queueing (Goyal, Vin and Cheng, "Start-time Fair Queueing",
SIGCOMM 1996) tags the head of lane i with

    S_i = max(v, F_i)        F_i = S_i + 1 / w_i once that head is dispatched

where v, the class's virtual time, is the start tag of the request dispatched last, and F_i is the
finish tag of lane i's previous request. The head with the smallest start tag goes first (ties by
arrival). While tenants are backlogged, tenant i receives a share w_i / sum(w) of the dispatches,
whatever their arrival rates; a tenant that was idle re-enters at the current virtual time, so it
neither banks credit while idle nor waits behind another tenant's backlog.

Only lane heads carry tags (computed when an entry becomes the head), so removing an entry from the
middle of a lane (a cancelled or expired request) needs no re-tagging, and removing a head hands its
unused start tag to the next entry: a tenant is charged only for requests actually dispatched.

This module is pure bookkeeping: no clock, no asyncio.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class Entry(Generic[T]):
    """A queued item; the handle used to remove it."""

    item: T
    tenant: str
    priority: int
    seq: int
    live: bool = True


@dataclass(eq=False, slots=True)
class _Lane(Generic[T]):
    entries: deque[Entry[T]] = field(default_factory=deque)
    live: int = 0
    start: float = 0.0
    """Start tag of the head entry (meaningful while live > 0)."""
    finish: float = 0.0
    """Finish tag of the last dispatched entry."""

    def head(self) -> Entry[T]:
        while not self.entries[0].live:
            self.entries.popleft()
        return self.entries[0]

    def tail(self) -> Entry[T]:
        while not self.entries[-1].live:
            self.entries.pop()
        return self.entries[-1]


@dataclass(eq=False, slots=True)
class _Class(Generic[T]):
    vtime: float = 0.0
    live: int = 0
    lanes: dict[str, _Lane[T]] = field(default_factory=dict)
    heads: list[tuple[float, int, str]] = field(default_factory=list)
    """Heap of (start tag, head seq, tenant); entries that no longer match their lane are stale."""


class FairQueue(Generic[T]):
    """Priority classes of weighted-fair tenant lanes. All operations are O(log n) amortised."""

    def __init__(self, weights: Mapping[str, float] | None = None, default_weight: float = 1.0):
        for tenant, w in (weights or {}).items():
            if not w > 0:
                raise ValueError(f"tenant weight must be > 0, got {w!r} for {tenant!r}")
        if not default_weight > 0:
            raise ValueError(f"default tenant weight must be > 0, got {default_weight!r}")
        self._weights = dict(weights or {})
        self._default_weight = default_weight
        self._classes: dict[int, _Class[T]] = {}
        self._tenant_depth: dict[str, int] = {}
        self._seq = 0
        self.depth = 0

    def weight(self, tenant: str) -> float:
        return self._weights.get(tenant, self._default_weight)

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """New weights (a reload) apply from each lane's next dispatch; tags already given stand."""
        for tenant, w in weights.items():
            if not w > 0:
                raise ValueError(f"tenant weight must be > 0, got {w!r} for {tenant!r}")
        self._weights = dict(weights)

    def tenant_depths(self) -> dict[str, int]:
        return dict(self._tenant_depth)

    def class_depths(self) -> dict[int, int]:
        return {p: c.live for p, c in sorted(self._classes.items(), reverse=True)}

    def push(self, item: T, tenant: str, priority: int = 0) -> Entry[T]:
        self._seq += 1
        entry = Entry(item, tenant, priority, self._seq)
        cls = self._classes.get(priority)
        if cls is None:
            cls = self._classes[priority] = _Class()
        lane = cls.lanes.get(tenant)
        if lane is None:
            lane = cls.lanes[tenant] = _Lane()
        lane.entries.append(entry)
        lane.live += 1
        if lane.live == 1:
            # The tenant becomes backlogged: it re-enters at the class's virtual time.
            lane.start = max(cls.vtime, lane.finish)
            heapq.heappush(cls.heads, (lane.start, entry.seq, tenant))
        cls.live += 1
        self._tenant_depth[tenant] = self._tenant_depth.get(tenant, 0) + 1
        self.depth += 1
        return entry

    def peek(self) -> Entry[T] | None:
        """The entry `pop` would return."""
        if not self.depth:
            return None
        cls = self._classes[max(self._classes)]
        return self._top(cls)[1].head()

    def pop(self, entry: Entry[T] | None = None) -> Entry[T]:
        """Serve the next entry, or `entry` in its place: one of `lane_ahead()`'s, whose tenant is
        charged as for the next (fairness between tenants is unchanged; only its own FIFO order is)."""
        if not self.depth:
            raise IndexError("pop from an empty FairQueue")
        cls = self._classes[max(self._classes)]
        tenant, lane = self._top(cls)
        if entry is None:
            entry = lane.entries.popleft()
        elif not entry.live or entry.tenant != tenant or self._classes.get(entry.priority) is not cls:
            raise ValueError("only an entry of the lane whose turn it is can be served")
        heapq.heappop(cls.heads)
        cls.vtime = lane.start
        lane.finish = lane.start + 1.0 / self.weight(tenant)
        self._forget(cls, lane, entry)
        if lane.live:
            lane.start = max(cls.vtime, lane.finish)
            heapq.heappush(cls.heads, (lane.start, lane.head().seq, tenant))
        return entry

    def lane_ahead(self, k: int) -> list[Entry[T]]:
        """The next entry and the k - 1 entries after it in its own lane: those that may go next."""
        if not self.depth:
            return []
        lane = self._top(self._classes[max(self._classes)])[1]
        return list(itertools.islice((e for e in lane.entries if e.live), k))

    def remove(self, entry: Entry[T]) -> None:
        """Take a waiting entry out without serving it (cancelled, expired, pushed out)."""
        if not entry.live:
            return
        cls = self._classes[entry.priority]
        lane = cls.lanes[entry.tenant]
        was_head = lane.head() is entry
        self._forget(cls, lane, entry)
        if was_head and lane.live:
            # The next entry inherits the unused start tag: no service was received.
            heapq.heappush(cls.heads, (lane.start, lane.head().seq, entry.tenant))

    def newest(self, tenant: str) -> Entry[T] | None:
        """The tenant's most recent entry in its lowest priority class: the first to push out."""
        for priority in sorted(self._classes):
            lane = self._classes[priority].lanes.get(tenant)
            if lane is not None and lane.live:
                return lane.tail()
        return None

    def ahead_of_new(self, tenant: str, priority: int) -> float:
        """How many waiting entries a new (tenant, priority) entry can expect to be served after.

        Every entry in a higher class, the tenant's own lane, and from every other lane j in the
        class about k * w_j / w_tenant entries (capped by its length), k being the new entry's place
        in its own lane: that is how many j serves while the tenant's lane advances k places.
        """
        ahead = float(sum(c.live for p, c in self._classes.items() if p > priority))
        cls = self._classes.get(priority)
        if cls is None:
            return ahead
        own = cls.lanes.get(tenant)
        k = (own.live if own is not None else 0) + 1
        w = self.weight(tenant)
        for other, lane in cls.lanes.items():
            if other == tenant:
                ahead += lane.live
            elif lane.live:
                ahead += min(float(lane.live), k * self.weight(other) / w)
        return ahead

    def heads(self) -> Iterator[Entry[T]]:
        """The oldest entry of every lane."""
        for cls in self._classes.values():
            for lane in cls.lanes.values():
                if lane.live:
                    yield lane.head()

    def __iter__(self) -> Iterator[Entry[T]]:
        for cls in self._classes.values():
            for lane in cls.lanes.values():
                yield from (e for e in lane.entries if e.live)

    def _top(self, cls: _Class[T]) -> tuple[str, _Lane[T]]:
        heads = cls.heads
        while True:
            start, seq, tenant = heads[0]
            lane = cls.lanes.get(tenant)
            if lane is not None and lane.live and lane.start == start and lane.head().seq == seq:
                return tenant, lane
            heapq.heappop(heads)

    def _forget(self, cls: _Class[T], lane: _Lane[T], entry: Entry[T]) -> None:
        entry.live = False
        lane.live -= 1
        cls.live -= 1
        self.depth -= 1
        left = self._tenant_depth[entry.tenant] - 1
        if left:
            self._tenant_depth[entry.tenant] = left
        else:
            del self._tenant_depth[entry.tenant]
        if not lane.live:
            lane.entries.clear()
        if not cls.live:
            # Nobody is backlogged in this class: fairness history no longer matters.
            del self._classes[entry.priority]
        elif not lane.live and lane.finish <= cls.vtime:
            # An idle lane whose finish tag the virtual time has passed re-enters at vtime anyway.
            del cls.lanes[entry.tenant]
        elif len(cls.heads) > 4 * len(cls.lanes) + 64:
            cls.heads = [h for h in cls.heads if self._valid(cls, h)]
            heapq.heapify(cls.heads)

    @staticmethod
    def _valid(cls: _Class[T], head: tuple[float, int, str]) -> bool:
        lane = cls.lanes.get(head[2])
        if lane is None or not lane.live:
            return False
        return lane.start == head[0] and lane.head().seq == head[1]
