"""The admission queue of one model: late binding, fair order, deadlines, honest shedding.

A request is dispatched at once when nothing waits and the pool has a slot. Otherwise it waits as an
`asyncio.Future` in a `FairQueue` (priority, then weighted fairness between tenants, then FIFO) and
is handed a lease by `wake()`, which the pool calls whenever capacity appears; nothing polls. The
backend is chosen by the pool at that moment (late binding), not when the request arrived, and so is
the waiter: of the next waiter and up to `lookahead` - 1 behind it in the same tenant's lane, the
pool serves the one that fits the free backend best (its prompt's prefix cached there), each waiter
being passed over at most `lookahead` times. Priority and fairness between tenants are untouched.

Expected wait = (entries served before it + 1) / drain rate, the rate measured by `DrainRate`. Once
that rate is firm, a request whose expected wait exceeds its deadline is refused at once (429
`deadline`), and so is a waiter as soon as the rate says its turn will come too late (a burst that
arrived before the rate was firm); one that waits past its deadline is removed and answered 503
`queue_timeout`. Until the rate is firm the queue refuses only when full: a cold burst is taken in
whole and judged on evidence, not on the first second of a gateway busy taking it in. When a
refused client should come back is `RetryAdvice`'s job.

Batch lines (`Ticket.background`) wait apart, in a `BackgroundLane`: they are dispatched only when
no interactive request waits, and have no deadline.

Expiry uses one loop timer, armed for the earliest deadline, over a heap of deadlines: one handle
instead of one per waiter, and every expiry decision is taken against the injected clock (the timer
only says when to look), so tests drive expiry by advancing a fake clock and calling `wake()`.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gateway.admission.advice import RetryAdvice
from gateway.admission.background import BackgroundLane
from gateway.admission.drain import DrainRate
from gateway.admission.fairness import Entry, FairQueue
from gateway.admission.rejection import Rejected, RejectReason
from gateway.routing import RouteKey
from gateway.types import Clock, Sample

_NOT_DRAIN_BOUND: frozenset[RejectReason] = frozenset({"no_backend", "shutting_down"})
"""Refusals whose retry advice does not depend on how fast this queue drains."""


class Lease(Protocol):
    backend: str

    def release(self, sample: Sample | None) -> None: ...  # exactly once


class Dispatcher(Protocol):
    def pick(
        self, model: str, routes: Sequence[RouteKey | None], *, background: bool = False
    ) -> tuple[int, Lease] | None:
        """Which of these requests takes a free slot (its index), and its lease; None if no room."""

    def available(self, model: str) -> bool: ...  # some healthy backend serves the model


@dataclass(frozen=True, slots=True)
class Ticket:
    tenant: str
    priority: int = 0
    """Higher is served first."""
    timeout: float | None = None
    """Longest wait this request accepts, capped by its tenant's or the queue's timeout."""
    request_id: str | None = None
    route: RouteKey | None = None
    """What the dispatcher routes the request by (its prompt's prefix, its session)."""
    background: bool = False
    """A batch line: served only when no interactive request waits, never shed for its wait."""


@dataclass(eq=False, slots=True)
class _Waiter:
    ticket: Ticket
    future: asyncio.Future[Lease]
    enqueued_at: float
    deadline: float
    entry: Entry[_Waiter] | None = None
    """Set while queued; None once dispatched or removed."""
    passed: int = 0
    """Times a waiter behind it in its lane was given a slot first."""


@dataclass(slots=True)
class QueueCounters:
    """Monotonic counts since start, for the metrics layer."""

    admitted_fast: int = 0
    admitted_queued: int = 0
    cancelled: int = 0
    rejected: dict[str, int] = field(default_factory=dict)


class AdmissionQueue:
    def __init__(
        self,
        model: str,
        dispatcher: Dispatcher,
        *,
        clock: Clock,
        max_depth: int,
        timeout: float,
        tenant_weights: Mapping[str, float] | None = None,
        tenant_timeouts: Mapping[str, float] | None = None,
        on_change: Callable[[], None] | None = None,
        drain_tau: float = 10.0,
        min_backlog: float = 1.0,
        default_retry_after: float = 1.0,
        lookahead: int = 1,
    ):
        if max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {max_depth}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        if not default_retry_after > 0:
            raise ValueError(f"default_retry_after must be > 0, got {default_retry_after!r}")
        self.model = model
        self.max_depth = max_depth
        self.timeout = timeout
        self.default_retry_after = default_retry_after
        self.lookahead = max(1, lookahead)
        self.counters = QueueCounters()
        self._dispatcher = dispatcher
        self._clock = clock
        self._on_change = on_change
        self._fair: FairQueue[_Waiter] = FairQueue(tenant_weights)
        self.background = BackgroundLane(model, dispatcher, FairQueue(tenant_weights))
        self._tenant_timeouts = dict(tenant_timeouts or {})
        """Per-tenant cap on the wait, instead of `timeout`."""
        # A queue shorter than the dispatches a rate needs would drain before it could be measured.
        self._drain = DrainRate(
            tau=drain_tau, min_backlog=min_backlog, min_events=max(1, min(16, max_depth)), now=clock()
        )
        self._advice = RetryAdvice(floor=default_retry_after)
        self._deadlines: list[tuple[float, int, _Waiter]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline = 0.0
        self._dispatching = False
        self._again = False

    # -- reading -------------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        return self._fair.depth

    @property
    def drain_rate(self) -> float | None:
        """Dispatches per second while requests wait; None before it has been measured."""
        return self._drain.rate(self._clock())

    def estimated_wait(self, tenant: str | None = None, priority: int = 0) -> float | None:
        """Seconds a request arriving now would wait; None when the drain rate is unknown."""
        ahead = self._fair.depth if tenant is None else self._fair.ahead_of_new(tenant, priority)
        return self._drain_time(ahead + 1)

    def state(self) -> dict[str, object]:
        now = self._clock()
        oldest = min((e.item.enqueued_at for e in self._fair.heads()), default=None)
        rate = self._drain.rate(now)
        return {
            "model": self.model,
            "depth": self._fair.depth,
            "max_depth": self.max_depth,
            "tenants": self._fair.tenant_depths(),
            "priorities": {str(p): n for p, n in self._fair.class_depths().items()},
            "drain_rate": None if rate is None else round(rate, 3),
            "oldest_wait": None if oldest is None else round(now - oldest, 3),
            "estimated_wait": self._rounded(self.estimated_wait()),
            "admitted_fast": self.counters.admitted_fast,
            "admitted_queued": self.counters.admitted_queued,
            "background_depth": self.background.depth,
            "admitted_background": self.background.admitted,
            "cancelled": self.counters.cancelled,
            "rejected": dict(self.counters.rejected),
        }

    # -- admitting -----------------------------------------------------------------------------

    async def admit(self, ticket: Ticket) -> Lease:
        """A lease on a backend slot; raises `Rejected` when the request is shed."""
        if ticket.background:
            return await self.background.admit(ticket, interactive_waiting=self._fair.depth > 0)
        if not self._fair.depth:
            got = self._dispatcher.pick(self.model, (ticket.route,))
            if got is not None:
                self.counters.admitted_fast += 1
                return got[1]
        try:
            waiter = self._enqueue(ticket)
        except Rejected as refused:
            raise await self._advised(refused) from None
        try:
            return await waiter.future
        except asyncio.CancelledError:
            self._abandon(waiter)
            raise

    async def _advised(self, refused: Rejected) -> Rejected:
        """A refusal made before any drain rate was measured waits, at most `min_backlog`, for the
        first one, and is then advised on it: the refused of a cold burst are all turned away in its
        first instant, when nothing is known yet and the only safe advice is the whole timeout."""
        hold = self._drain.until_measured(self._clock())
        if refused.reason in _NOT_DRAIN_BOUND or hold <= 0:
            return refused
        await asyncio.sleep(hold)
        now = self._clock()
        rate = self._drain.rate(now)
        if rate is None:
            return refused
        wait = self._time_for(self._fair.depth + 1, rate)
        retry_after = self._advice.advise(now, wait, rate, firm=self._drain.firm(now), horizon=self.timeout)
        return Rejected(refused.reason, retry_after=retry_after, message=refused.message)

    def wake(self) -> None:
        """Capacity may have appeared: expire what is overdue, dispatch while slots last, then
        refuse the waiters that can no longer be reached before their deadline."""
        now = self._clock()
        changed = self._expire(now)
        changed = self._dispatch(now) > 0 or changed
        if self._trim(now) or changed:
            self._changed(now)

    def reconfigure(
        self,
        max_depth: int,
        timeout: float,
        tenant_weights: Mapping[str, float],
        tenant_timeouts: Mapping[str, float] | None = None,
    ) -> None:
        """New bounds and weights (a reload); waiters keep their deadlines, the next wake applies."""
        if max_depth < 0 or not timeout > 0:
            raise ValueError(f"bad queue bounds: max_depth {max_depth}, timeout {timeout!r}")
        self._fair.set_weights(tenant_weights)
        self.background.set_weights(tenant_weights)
        self._tenant_timeouts = dict(tenant_timeouts or {})
        self.max_depth = max_depth
        self.timeout = timeout

    def close(
        self, message: str = "the gateway is shutting down", reason: RejectReason = "shutting_down"
    ) -> None:
        """Answer every waiter 503 `reason` and stop the timer; later admissions still work."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = self._clock()
        while (entry := self._fair.peek()) is not None:
            waiter = entry.item
            self._remove(waiter)
            if not waiter.future.done():
                waiter.future.set_exception(self._reject(reason, self.default_retry_after, message))
        self.background.close(self._reject(reason, self.default_retry_after, message))
        self._deadlines.clear()
        self._changed(now)

    def _enqueue(self, ticket: Ticket) -> _Waiter:
        now = self._clock()
        if not self._dispatcher.available(self.model):
            raise self._reject(
                "no_backend",
                self.default_retry_after,
                f"no healthy backend serves model {self.model!r}",
            )
        if self._expire(now):
            self._changed(now)
        cap = self._tenant_timeouts.get(ticket.tenant, self.timeout)
        limit = cap if ticket.timeout is None else min(ticket.timeout, cap)
        rate = self._drain.rate(now) if self._drain.firm(now) else None
        ahead = 0.0 if rate is None else self._fair.ahead_of_new(ticket.tenant, ticket.priority)
        wait = None if rate is None else self._time_for(ahead + 1, rate)
        if limit <= 0:
            raise self._reject("deadline", wait, f"no free slot for model {self.model!r} and no wait allowed")
        if wait is not None and wait > limit:
            raise self._reject(
                "deadline",
                wait,
                f"expected queue wait {wait:.1f}s ({ahead:.0f} requests ahead at "
                f"{self._rate_text(now)}) exceeds the {limit:.1f}s deadline",
            )
        if self._fair.depth >= self.max_depth:
            self._make_room(ticket.tenant, now)
        future: asyncio.Future[Lease] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(ticket, future, now, now + limit)
        waiter.entry = self._fair.push(waiter, ticket.tenant, ticket.priority)
        self._drain.set_backlogged(now, True)
        heapq.heappush(self._deadlines, (waiter.deadline, waiter.entry.seq, waiter))
        self._arm(waiter.deadline, now)
        # A slot may be free although the queue was not empty (a limit rose without a wake).
        self._dispatch(now)
        self._changed(now)
        return waiter

    def _make_room(self, tenant: str, now: float) -> None:
        """Queue full: push out the most over-share tenant's newest waiter, or refuse."""
        depths = self._fair.tenant_depths()
        weight = self._fair.weight
        total = sum(weight(t) for t in depths) + (0.0 if tenant in depths else weight(tenant))
        mine = depths.get(tenant, 0)
        share = self.max_depth * weight(tenant) / total
        victim = max(
            (t for t in depths if t != tenant and depths[t] > self.max_depth * weight(t) / total),
            key=lambda t: depths[t] / weight(t),
            default=None,
        )
        if victim is not None and mine + 1 <= share:
            entry = self._fair.newest(victim)
            assert entry is not None
            self._remove(entry.item)
            if not entry.item.future.done():  # else it was cancelled: its place is free already
                entry.item.future.set_exception(
                    self._over_share(victim, depths[victim], total, now, pushed_out=True)
                )
            return
        others_wait = any(t != tenant for t in depths)
        if others_wait and mine >= share:
            raise self._over_share(tenant, mine, total, now, pushed_out=False)
        raise self._reject(
            "queue_full",
            self._drain_time(self._fair.depth + 1),
            f"queue for model {self.model!r} is full: {self._fair.depth} of {self.max_depth} "
            f"waiting, draining at {self._rate_text(now)}",
        )

    def _over_share(
        self, tenant: str, depth: int, total_weight: float, now: float, *, pushed_out: bool
    ) -> Rejected:
        fraction = self._fair.weight(tenant) / total_weight
        rate = self._drain.rate(now)
        # The tenant's own backlog drains at its share of the rate.
        wait = None if rate is None else self._time_for(depth + 1, rate * fraction)
        what = "pushed out of" if pushed_out else "refused by"
        return self._reject(
            "tenant_over_share",
            wait,
            f"{what} the full queue for model {self.model!r}: tenant {tenant!r} holds {depth} "
            f"of {self.max_depth} places; its share while other tenants wait is "
            f"{self.max_depth * fraction:.1f}",
        )

    # -- dispatching and removal ---------------------------------------------------------------

    def _dispatch(self, now: float) -> int:
        """Hand leases to the best waiters while the pool has room. Re-entrant calls fold in."""
        if self._dispatching:
            self._again = True
            return 0
        self._dispatching = True
        n = 0
        try:
            self._again = True
            while self._again:
                self._again = False
                while (entry := self._fair.peek()) is not None:
                    if entry.item.future.done():  # cancelled; its task has not resumed yet
                        self._remove(entry.item)
                        continue
                    ahead = self._may_go_next(entry)
                    got = self._dispatcher.pick(self.model, [e.item.ticket.route for e in ahead])
                    if got is None:
                        break
                    chosen, lease = ahead[got[0]], got[1]
                    for passed in ahead[: got[0]]:
                        passed.item.passed += 1
                    self._fair.pop(chosen)
                    chosen.item.entry = None
                    chosen.item.future.set_result(lease)
                    n += 1
                if not self._fair.depth:
                    self.background.dispatch()
        finally:
            self._dispatching = False
        if n:
            self.counters.admitted_queued += n
            self._drain.record(now, n)
        return n

    def _may_go_next(self, head: Entry[_Waiter]) -> list[Entry[_Waiter]]:
        """The waiters that compete for a free slot: the next one and up to `lookahead` - 1 after it
        in its tenant's lane (priority and fairness between tenants pick the lane), unless the next
        one was passed over `lookahead` times already; the dispatcher gives the slot to the one that
        fits the free backend best."""
        if self.lookahead == 1 or head.item.passed >= self.lookahead:
            return [head]
        return [e for e in self._fair.lane_ahead(self.lookahead) if not e.item.future.done()]

    def _abandon(self, waiter: _Waiter) -> None:
        """The awaiting task was cancelled (client gone): leave the queue, return any lease."""
        future = waiter.future
        if waiter.entry is not None:
            self._remove(waiter)
        elif not future.cancelled() and future.done():
            if future.exception() is not None:
                return  # already answered (shed); nothing is held
            # Granted in the same tick as the cancellation: the slot goes back to the pool,
            # whose release wakes the queues.
            future.result().release(None)
        self.counters.cancelled += 1
        self._changed(self._clock())

    def _remove(self, waiter: _Waiter) -> None:
        if waiter.entry is not None:
            self._fair.remove(waiter.entry)
            waiter.entry = None

    def _expire(self, now: float) -> bool:
        heap = self._deadlines
        expired = False
        while heap and (heap[0][2].entry is None or heap[0][0] <= now):
            _, _, waiter = heapq.heappop(heap)
            if waiter.entry is None:
                continue
            self._remove(waiter)
            expired = True
            if waiter.future.done():
                continue
            waited = now - waiter.enqueued_at
            waiter.future.set_exception(
                self._reject(
                    "queue_timeout",
                    self._drain_time(self._fair.depth + 1),
                    f"waited {waited:.1f}s in the queue for model {self.model!r} without a free "
                    f"slot ({self._fair.depth} still waiting, draining at {self._rate_text(now)})",
                )
            )
        if len(heap) > 2 * self._fair.depth + 64:
            self._deadlines = [d for d in heap if d[2].entry is not None]
            heapq.heapify(self._deadlines)
        return expired

    def _trim(self, now: float) -> bool:
        """Refuse (429 `deadline`) each tenant's newest waiters while, at the measured drain rate,
        their turn would come after their deadline.

        Admission makes the same test, but only once the drain rate is firm: a burst into a cold
        queue is let in whole, and without this its tail would wait out the full timeout for a 503.
        The newest waiter of a tenant is served after about as many entries as a new arrival of that
        tenant would be (`ahead_of_new`). Cheap when nothing can be late: if the whole queue drains
        before the earliest deadline, nothing is scanned.
        """
        heap = self._deadlines
        if not self._fair.depth or not heap or not self._drain.firm(now):
            return False
        rate = self._drain.rate(now)
        if rate is None or rate <= 0 or self._time_for(self._fair.depth, rate) <= heap[0][0] - now:
            return False
        trimmed = False
        for tenant in list(self._fair.tenant_depths()):
            while (entry := self._fair.newest(tenant)) is not None:
                waiter = entry.item
                ahead = self._fair.ahead_of_new(tenant, entry.priority)
                wait, left = self._time_for(ahead, rate), waiter.deadline - now
                if wait <= left:
                    break
                self._remove(waiter)
                trimmed = True
                if not waiter.future.done():
                    waiter.future.set_exception(
                        self._reject(
                            "deadline",
                            wait,
                            f"expected queue wait {wait:.1f}s ({ahead - 1:.0f} requests ahead at "
                            f"{self._rate_text(now)}) exceeds the {left:.1f}s left of its deadline",
                        )
                    )
        return trimmed

    def _arm(self, deadline: float, now: float) -> None:
        if self._timer is not None and self._timer_deadline <= deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer_deadline = deadline
        self._timer = loop.call_at(loop.time() + max(0.0, deadline - now), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = self._clock()
        if self._expire(now):
            self._changed(now)
        if self._deadlines:
            self._arm(self._deadlines[0][0], now)

    def _changed(self, now: float) -> None:
        self._drain.set_backlogged(now, self._fair.depth > 0)
        if self._on_change is not None:
            self._on_change()

    # -- estimates -----------------------------------------------------------------------------

    def _drain_time(self, n: float) -> float | None:
        rate = self._drain.rate(self._clock())
        return None if rate is None else self._time_for(n, rate)

    @staticmethod
    def _time_for(n: float, rate: float) -> float:
        return n / rate if rate > 0 else float("inf")

    def _reject(self, reason: RejectReason, wait: float | None, message: str) -> Rejected:
        """A refusal with its advice: the default when no backend serves the model (the health
        checks decide when one does) or the gateway is shutting down (another process or replica
        answers the retry), else what `RetryAdvice` makes of the wait and the rate."""
        self.counters.rejected[reason] = self.counters.rejected.get(reason, 0) + 1
        if reason in _NOT_DRAIN_BOUND:
            retry_after = self.default_retry_after
        else:
            now = self._clock()
            rate = self._drain.rate(now)
            retry_after = self._advice.advise(
                now, wait, rate, firm=self._drain.firm(now), horizon=self.timeout
            )
        return Rejected(reason, retry_after=retry_after, message=message)

    def _rate_text(self, now: float) -> str:
        rate = self._drain.rate(now)
        return "an unmeasured rate" if rate is None else f"{rate:.2f} requests/s"

    @staticmethod
    def _rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 3)
