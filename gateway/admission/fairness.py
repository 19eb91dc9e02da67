"""Waiting order: strict priority classes, weighted fair sharing of service between tenants, FIFO per tenant.

Within one priority class each tenant i has a lane (a FIFO), a weight w_i and a counter c_i of the
service it received divided by its weight. The service a request costs is its price (`Pricing`):

    tokens:    w_p * prompt_tokens + w_q * output_tokens    (the Virtual Token Counter)
    requests:  1 per request

The next request is the head of the backlogged lane with the smallest counter (ties by arrival), as
the Virtual Token Counter serves the least-served backlogged client (Sheng et al., "Fairness in
Serving Large Language Models", OSDI 2024). Service is charged when it becomes known: a request's
prompt when it is dispatched (`cost`, an estimate from its length), the rest through `charge` as the
backend reports it (output tokens as they stream, the prompt's correction once `usage` says),
whether or not the tenant still has requests waiting. While tenants stay backlogged, their service
per unit of weight differs by at most a small multiple of the largest request's price (the paper's
bound), whatever their arrival rates: each receives its share w_i / sum(w) of the service.

No banked credit: a lane that becomes backlogged is lifted to the smallest counter of the lanes
already backlogged in its class (or, with none, to that of the last lane served), so service it did
not ask for while idle is not owed to it; a counter above that keeps its excess, which is service
received. Removing a waiting entry (cancelled, expired) charges nothing: a tenant pays only for
what was dispatched.

This module is pure bookkeeping: no clock, no asyncio.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from gateway.admission.pricing import Pricing

__all__ = ["Entry", "FairQueue", "Pricing"]

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class Entry(Generic[T]):
    """A queued item; the handle used to remove it."""

    item: T
    tenant: str
    priority: int
    seq: int
    cost: float = 0.0
    """Estimated prompt tokens, charged at dispatch."""
    live: bool = True


@dataclass(eq=False, slots=True)
class _Lane(Generic[T]):
    entries: deque[Entry[T]] = field(default_factory=deque)
    live: int = 0
    counter: float = 0.0
    """Service received / weight."""
    keyed: float = 0.0
    """The counter its current heap entry was pushed with."""
    served: int = 0
    priced: float = 0.0
    """Requests dispatched and the service they were charged: the lane's mean price."""

    def head(self) -> Entry[T]:
        while not self.entries[0].live:
            self.entries.popleft()
        return self.entries[0]

    def tail(self) -> Entry[T]:
        while not self.entries[-1].live:
            self.entries.pop()
        return self.entries[-1]

    def mean_price(self) -> float:
        return self.priced / self.served if self.served and self.priced > 0 else 1.0


@dataclass(eq=False, slots=True)
class _Class(Generic[T]):
    floor: float = 0.0
    """The counter of the lane served last: where a lane re-enters when none is backlogged."""
    live: int = 0
    lanes: dict[str, _Lane[T]] = field(default_factory=dict)
    heads: list[tuple[float, int, str]] = field(default_factory=list)
    """Heap of (counter, head seq, tenant); entries that no longer match their lane are stale."""


class FairQueue(Generic[T]):
    """Priority classes of weighted-fair tenant lanes. All operations are O(log n) amortised.

    Lanes keep their counters while idle (a tenant's answers may still be streaming and charged);
    there is one lane per tenant and priority class used, both bounded by the configuration.
    """

    def __init__(
        self,
        weights: Mapping[str, float] | None = None,
        default_weight: float = 1.0,
        pricing: Pricing | None = None,
    ):
        if not default_weight > 0:
            raise ValueError(f"default tenant weight must be > 0, got {default_weight!r}")
        self._weights: dict[str, float] = {}
        self.set_weights(weights or {})
        self._default_weight = default_weight
        self.pricing = pricing or Pricing()
        self._classes: dict[int, _Class[T]] = {}
        self._busy: set[int] = set()
        self._tenant_depth: dict[str, int] = {}
        self._seq = 0
        self.depth = 0

    def weight(self, tenant: str) -> float:
        return self._weights.get(tenant, self._default_weight)

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """New weights (a reload) apply to service charged from now on; counters already kept stand."""
        for tenant, w in weights.items():
            if not w > 0:
                raise ValueError(f"tenant weight must be > 0, got {w!r} for {tenant!r}")
        self._weights = dict(weights)

    def tenant_depths(self) -> dict[str, int]:
        return dict(self._tenant_depth)

    def class_depths(self) -> dict[int, int]:
        return {p: self._classes[p].live for p in sorted(self._busy, reverse=True)}

    def service(self, tenant: str, priority: int = 0) -> float:
        """The tenant's counter in a class: service received (in prices) divided by its weight."""
        cls = self._classes.get(priority)
        lane = cls.lanes.get(tenant) if cls is not None else None
        return lane.counter if lane is not None else 0.0

    def push(self, item: T, tenant: str, priority: int = 0, cost: float = 0.0) -> Entry[T]:
        """Queue `item`; `cost` is its estimated prompt tokens (charged when it is dispatched)."""
        self._seq += 1
        entry = Entry(item, tenant, priority, self._seq, cost)
        cls = self._class(priority)
        lane = cls.lanes.get(tenant)
        if lane is None:
            lane = cls.lanes[tenant] = _Lane()
        if not lane.live:
            # The tenant becomes backlogged: lifted to the least-served backlogged lane (no banking).
            lowest = self._top(cls)[1].counter if cls.live else cls.floor
            lane.counter = max(lane.counter, lowest)
            self._key(cls, lane, tenant, entry.seq)
        lane.entries.append(entry)
        lane.live += 1
        cls.live += 1
        self._busy.add(priority)
        self._tenant_depth[tenant] = self._tenant_depth.get(tenant, 0) + 1
        self.depth += 1
        return entry

    def peek(self) -> Entry[T] | None:
        """The entry `pop` would return."""
        if not self.depth:
            return None
        return self._top(self._classes[max(self._busy)])[1].head()

    def pop(self, entry: Entry[T] | None = None) -> Entry[T]:
        """Serve the next entry, or `entry` in its place: one of `lane_ahead()`'s (fairness between
        tenants is unchanged; only the lane's own FIFO order is). Its tenant is charged its price."""
        if not self.depth:
            raise IndexError("pop from an empty FairQueue")
        cls = self._classes[max(self._busy)]
        tenant, lane = self._top(cls)
        if entry is None:
            entry = lane.head()
        elif not entry.live or entry.tenant != tenant or self._classes.get(entry.priority) is not cls:
            raise ValueError("only an entry of the lane whose turn it is can be served")
        cls.floor = lane.counter
        price = self.pricing.dispatch(entry.cost)
        lane.served += 1
        lane.priced += price
        lane.counter += price / self.weight(tenant)
        self._forget(cls, lane, entry)
        if lane.live:
            self._key(cls, lane, tenant, lane.head().seq)
        return entry

    def charge(self, tenant: str, priority: int, *, prompt: float = 0.0, output: float = 0.0) -> None:
        """Service learned after dispatch: output tokens streamed, or a prompt's correction (which may
        be negative). Counts only when service is priced by tokens."""
        pricing = self.pricing
        if not pricing.by_tokens:
            return
        price = pricing.prompt * prompt + pricing.output * output
        if not price:
            return
        cls = self._class(priority)
        lane = cls.lanes.get(tenant)
        if lane is None:
            lane = cls.lanes[tenant] = _Lane(counter=cls.floor)
        lane.priced += price
        lane.counter += price / self.weight(tenant)
        if lane.live:
            self._key(cls, lane, tenant, lane.head().seq)
            self._compact(cls)

    def served(self, tenant: str, priority: int, cost: float) -> None:
        """A request of the tenant's was dispatched without waiting, the class being empty: as if
        pushed (lifted to the floor) and popped at once (charged its price)."""
        cls = self._class(priority)
        lane = cls.lanes.get(tenant)
        if lane is None:
            lane = cls.lanes[tenant] = _Lane(counter=cls.floor)
        if not lane.live:
            lane.counter = max(lane.counter, self._top(cls)[1].counter if cls.live else cls.floor)
            cls.floor = lane.counter
        price = self.pricing.dispatch(cost)
        lane.served += 1
        lane.priced += price
        lane.counter += price / self.weight(tenant)
        if lane.live:
            self._key(cls, lane, tenant, lane.head().seq)

    def lane_ahead(self, k: int) -> list[Entry[T]]:
        """The next entry and the k - 1 entries after it in its own lane: those that may go next."""
        if not self.depth:
            return []
        lane = self._top(self._classes[max(self._busy)])[1]
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
            self._key(cls, lane, entry.tenant, lane.head().seq)

    def newest(self, tenant: str) -> Entry[T] | None:
        """The tenant's most recent entry in its lowest priority class: the first to push out."""
        for priority in sorted(self._busy):
            lane = self._classes[priority].lanes.get(tenant)
            if lane is not None and lane.live:
                return lane.tail()
        return None

    def ahead_of_new(self, tenant: str, priority: int) -> float:
        """How many waiting entries a new (tenant, priority) entry can expect to be served after.

        Every entry in a higher class, the tenant's own lane, and from every other lane j in the
        class about k * (p_t / w_t) / (p_j / w_j) entries (capped by its length), k being the new
        entry's place in its own lane and p a lane's mean price per request: that is how many j
        serves while the tenant's counter advances by k of its requests.
        """
        ahead = float(sum(self._classes[p].live for p in self._busy if p > priority))
        cls = self._classes.get(priority)
        if cls is None or not cls.live:
            return ahead
        own = cls.lanes.get(tenant)
        k = (own.live if own is not None else 0) + 1
        step = (own.mean_price() if own is not None else 1.0) / self.weight(tenant)
        for other, lane in cls.lanes.items():
            if other == tenant:
                ahead += lane.live
            elif lane.live:
                ahead += min(float(lane.live), k * step * self.weight(other) / lane.mean_price())
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

    def _class(self, priority: int) -> _Class[T]:
        cls = self._classes.get(priority)
        if cls is None:
            cls = self._classes[priority] = _Class()
        return cls

    @staticmethod
    def _key(cls: _Class[T], lane: _Lane[T], tenant: str, seq: int) -> None:
        lane.keyed = lane.counter
        heapq.heappush(cls.heads, (lane.counter, seq, tenant))

    def _top(self, cls: _Class[T]) -> tuple[str, _Lane[T]]:
        heads = cls.heads
        while True:
            head = heads[0]
            if self._valid(cls, head):
                return head[2], cls.lanes[head[2]]
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
            self._busy.discard(entry.priority)
            cls.heads.clear()
        else:
            self._compact(cls)

    def _compact(self, cls: _Class[T]) -> None:
        if len(cls.heads) > 4 * len(cls.lanes) + 64:
            cls.heads = [h for h in cls.heads if self._valid(cls, h)]
            heapq.heapify(cls.heads)

    @staticmethod
    def _valid(cls: _Class[T], head: tuple[float, int, str]) -> bool:
        lane = cls.lanes.get(head[2])
        if lane is None or not lane.live:
            return False
        return lane.keyed == head[0] and lane.head().seq == head[1]
