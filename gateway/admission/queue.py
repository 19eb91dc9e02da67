"""The admission queue of one model: late binding, fair order, deadlines, honest shedding.

A request is dispatched at once when nothing waits and the pool has a slot. Otherwise it waits as an
`asyncio.Future` among the `Waiters` (priority, then weighted fairness between tenants, then FIFO)
and is handed a lease by `wake()`, which the pool calls whenever capacity appears; nothing polls.
The backend is chosen by the pool at that moment (late binding), not when the request arrived, and
so is the waiter: of the next waiter and up to `lookahead` - 1 behind it in the same tenant's lane,
the pool serves the one that fits the free backend best (its prompt's prefix cached there), each
waiter being passed over at most `lookahead` times. Priority and fairness between tenants are
untouched. When and how a request is refused is `Shedding`'s job; when a waiter's deadline passes
is the `ExpiryTimer`'s. An interactive request's deadline is what its model's TTFT budget leaves
after the engine's share (gateway.admission.budget), counted from its arrival; a patient one
(`x-queue-timeout` or its tenant's `queue_timeout`, longer than that) waits what it asked for, in
priority classes below every interactive one.

A retry (`Ticket.exclude`: the backends that failed it) is admitted like any request, so it keeps
to priority and fairness; at its turn it goes alone (no lookahead) to a backend it has not tried,
and is refused 503 `no_backend` if only the backends that failed it have room, rather than hold
the queue for a slot elsewhere.

Batch lines (`Ticket.background`) wait apart, in a `BackgroundLane`: they are dispatched only when
no interactive request waits, and have no deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic

from gateway.admission.background import BackgroundLane
from gateway.admission.budget import rank
from gateway.admission.drain import DrainRate
from gateway.admission.fairness import Entry, FairQueue, Pricing
from gateway.admission.rejection import Rejected, RejectReason
from gateway.admission.shedding import Shedding
from gateway.admission.ticket import L, SlotSource, Ticket
from gateway.admission.waiters import ExpiryTimer, Waiter, Waiters
from gateway.types import Clock


@dataclass(slots=True)
class QueueCounters:
    """Monotonic counts since start, for the metrics layer."""

    admitted_fast: int = 0
    admitted_queued: int = 0
    cancelled: int = 0
    rejected: dict[str, int] = field(default_factory=dict)


class AdmissionQueue(Generic[L]):
    def __init__(
        self,
        model: str,
        source: SlotSource[L],
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
        budget: Callable[[str | None], float | None] | None = None,
        pricing: Pricing | None = None,
    ):
        if max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {max_depth}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        if not default_retry_after > 0:
            raise ValueError(f"default_retry_after must be > 0, got {default_retry_after!r}")
        self.model = model
        self.lookahead = max(1, lookahead)
        self._source = source
        self._clock = clock
        self._on_change = on_change
        self._waiters: Waiters[L] = Waiters(tenant_weights, pricing)
        # A queue shorter than the dispatches a rate needs would drain before it could be measured.
        self._drain = DrainRate(
            tau=drain_tau, min_backlog=min_backlog, min_events=max(1, min(16, max_depth)), now=clock()
        )
        self._shed = Shedding(
            model,
            self._waiters,
            self._drain,
            clock,
            max_depth=max_depth,
            timeout=timeout,
            default_retry_after=default_retry_after,
            tenant_timeouts=tenant_timeouts,
            budget=budget,
        )
        self.counters = QueueCounters(rejected=self._shed.rejected)
        self.background: BackgroundLane[L] = BackgroundLane(
            model, source, FairQueue(tenant_weights, pricing=pricing), self._shed.no_other_backend
        )
        self._timer = ExpiryTimer(self._on_timer)
        self._dispatching = False
        self._again = False

    # -- reading -------------------------------------------------------------------------------

    @property
    def max_depth(self) -> int:
        return self._shed.max_depth

    @property
    def timeout(self) -> float:
        return self._shed.timeout

    @property
    def default_retry_after(self) -> float:
        return self._shed.default_retry_after

    @property
    def depth(self) -> int:
        return self._waiters.depth

    @property
    def drain_rate(self) -> float | None:
        """Dispatches per second while requests wait; None before it has been measured."""
        return self._drain.rate(self._clock())

    def next_tenant(self) -> str | None:
        """The tenant of the request the next free slot would go to (a batch line's when no
        interactive request waits); None when nothing waits."""
        entry = self._waiters.fair.peek()
        return entry.tenant if entry is not None else self.background.next_tenant()

    def classify(self, ticket: Ticket) -> Ticket:
        """`ticket` with its class (interactive or patient) and longest wait decided, as admission
        would decide them now (gateway.admission.budget); a batch line's is left as it is."""
        return ticket if ticket.background else self._shed.classify(ticket)

    def estimated_wait(self, tenant: str | None = None, priority: int = 0) -> float | None:
        """Seconds a request arriving now would wait; None when the drain rate is unknown."""
        fair = self._waiters.fair
        ahead = fair.depth if tenant is None else fair.ahead_of_new(tenant, priority)
        return self._shed.drain_time(ahead + 1)

    def state(self) -> dict[str, object]:
        now = self._clock()
        fair = self._waiters.fair
        oldest = min((e.item.enqueued_at for e in fair.heads()), default=None)
        rate = self._drain.rate(now)
        return {
            "model": self.model,
            "depth": fair.depth,
            "max_depth": self.max_depth,
            "bound": self._shed.bound(now),
            "tenants": fair.tenant_depths(),
            "priorities": {str(p): n for p, n in fair.class_depths().items()},
            "drain_rate": None if rate is None else round(rate, 3),
            "oldest_wait": None if oldest is None else round(now - oldest, 3),
            "estimated_wait": _rounded(self.estimated_wait()),
            "wait_budget": _rounded(self._shed.budget()),
            "admitted_fast": self.counters.admitted_fast,
            "admitted_queued": self.counters.admitted_queued,
            "background_depth": self.background.depth,
            "admitted_background": self.background.admitted,
            "cancelled": self.counters.cancelled,
            "rejected": dict(self.counters.rejected),
        }

    # -- admitting -----------------------------------------------------------------------------

    async def admit(self, ticket: Ticket) -> L:
        """A lease on a backend slot; raises `Rejected` when the request is shed."""
        if ticket.background:
            return await self.background.admit(ticket, interactive_waiting=self._waiters.depth > 0)
        if not self._waiters.depth:
            got = self._source.pick(self.model, (ticket.route,), exclude=ticket.exclude)
            if got is not None:
                self.counters.admitted_fast += 1
                self._waiters.fair.served(ticket.tenant, ticket.priority, ticket.prompt_tokens)
                return got[1]
        try:
            waiter = self._enqueue(ticket)
        except Rejected as refused:
            raise await self._shed.advised(refused) from None
        try:
            return await waiter.future
        except asyncio.CancelledError:
            self._abandon(waiter)
            raise

    def wake(self) -> None:
        """Capacity may have appeared: expire what is overdue, dispatch while slots last, then
        refuse the waiters that can no longer be reached before their deadline."""
        now = self._clock()
        changed = self._shed.expire(now)
        changed = self._dispatch(now) > 0 or changed
        if self._shed.trim(now) or changed:
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
        self._waiters.fair.set_weights(tenant_weights)
        self.background.set_weights(tenant_weights)
        self._shed.tenant_timeouts = dict(tenant_timeouts or {})
        self._shed.max_depth = max_depth
        self._shed.timeout = timeout

    def charge(self, ticket: Ticket, *, prompt: float = 0.0, output: float = 0.0) -> None:
        """Service `ticket`'s tenant received after dispatch (see gateway.admission.fairness)."""
        fair = self.background.fair if ticket.background else self._waiters.fair
        fair.charge(ticket.tenant, ticket.priority, prompt=prompt, output=output)

    def set_pricing(self, pricing: Pricing) -> None:
        """What service costs from now on (a reload); counters kept so far stand."""
        self._waiters.fair.pricing = pricing
        self.background.fair.pricing = pricing

    def close(
        self, message: str = "the gateway is shutting down", reason: RejectReason = "shutting_down"
    ) -> None:
        """Answer every waiter 503 `reason` and stop the timer; later admissions still work."""
        self._timer.cancel()
        now = self._clock()
        retry_after = self.default_retry_after
        while (entry := self._waiters.fair.peek()) is not None:
            waiter = entry.item
            self._waiters.remove(waiter)
            if not waiter.future.done():
                waiter.future.set_exception(self._shed.reject(reason, retry_after, message))
        self.background.close(self._shed.reject(reason, retry_after, message))
        self._waiters.forget_deadlines()
        self._changed(now)

    def _enqueue(self, ticket: Ticket) -> Waiter[L]:
        now = self._clock()
        if not self._source.available(self.model, exclude=ticket.exclude):
            raise self._shed.reject(
                "no_backend",
                self.default_retry_after,
                f"no healthy backend serves model {self.model!r}",
            )
        if self._shed.expire(now):
            self._changed(now)
        ticket = self._shed.classify(ticket)
        assert ticket.wait is not None
        limit = ticket.wait - (0.0 if ticket.arrived is None else max(0.0, now - ticket.arrived))
        place = rank(ticket.priority, bool(ticket.patient))
        self._shed.check_arrival(ticket, place, limit, now)
        if self._waiters.depth >= self._shed.bound(now):
            self._shed.make_room(ticket.tenant, now)
        future: asyncio.Future[L] = asyncio.get_running_loop().create_future()
        waiter = self._waiters.push(ticket, future, now, now + limit, place)
        self._drain.set_backlogged(now, True)
        self._timer.arm(waiter.deadline, now)
        # A slot may be free although the queue was not empty (a limit rose without a wake).
        self._dispatch(now)
        self._changed(now)
        return waiter

    # -- dispatching and removal ---------------------------------------------------------------

    def _dispatch(self, now: float) -> int:
        """Hand leases to the best waiters while the pool has room; the number of waiters that left
        the queue (dispatched, or retries refused). Re-entrant calls fold in."""
        if self._dispatching:
            self._again = True
            return 0
        self._dispatching = True
        n = refused = 0
        try:
            self._again = True
            while self._again:
                self._again = False
                n, refused = self._dispatch_round(n, refused)
                if not self._waiters.depth:
                    self.background.dispatch()
        finally:
            self._dispatching = False
        if n:
            self.counters.admitted_queued += n
            self._drain.record(now, n)
        return n + refused

    def _dispatch_round(self, n: int, refused: int) -> tuple[int, int]:
        waiters = self._waiters
        while (entry := waiters.fair.peek()) is not None:
            if entry.item.future.done():  # cancelled; its task has not resumed yet
                waiters.remove(entry.item)
                continue
            exclude = entry.item.ticket.exclude
            ahead = self._may_go_next(entry)
            got = self._source.pick(self.model, [e.item.ticket.route for e in ahead], exclude=exclude)
            if got is None:
                if not exclude or not self._source.has_room(self.model):
                    break
                waiters.remove(entry.item)
                entry.item.future.set_exception(self._shed.no_other_backend(exclude))
                refused += 1
                continue
            chosen, lease = ahead[got[0]], got[1]
            for passed in ahead[: got[0]]:
                passed.item.passed += 1
            waiters.pop(chosen).future.set_result(lease)
            n += 1
        return n, refused

    def _may_go_next(self, head: Entry[Waiter[L]]) -> list[Entry[Waiter[L]]]:
        """The waiters that compete for a free slot: the next one and up to `lookahead` - 1 after it
        in its tenant's lane (priority and fairness between tenants pick the lane), unless the next
        one was passed over `lookahead` times already or is a retry; the pool gives the slot
        to the one that fits the free backend best. A retry behind the next one stays out: it may
        not go to every backend the others may."""
        if self.lookahead == 1 or head.item.passed >= self.lookahead or head.item.ticket.exclude:
            return [head]
        return [
            e
            for e in self._waiters.fair.lane_ahead(self.lookahead)
            if not e.item.future.done() and (e is head or not e.item.ticket.exclude)
        ]

    def _abandon(self, waiter: Waiter[L]) -> None:
        """The awaiting task was cancelled (client gone): leave the queue, return any lease."""
        future = waiter.future
        if waiter.entry is not None:
            self._waiters.remove(waiter)
        elif not future.cancelled() and future.done():
            if future.exception() is not None:
                return  # already answered (shed); nothing is held
            # Granted in the same tick as the cancellation: the slot goes back to the pool,
            # whose release wakes the queues.
            future.result().release(None)
        self.counters.cancelled += 1
        self._changed(self._clock())

    def _on_timer(self) -> None:
        now = self._clock()
        if self._shed.expire(now):
            self._changed(now)
        earliest = self._waiters.earliest_deadline()
        if earliest is not None:
            self._timer.arm(earliest, now)

    def _changed(self, now: float) -> None:
        self._drain.set_backlogged(now, self._waiters.depth > 0)
        if self._on_change is not None:
            self._on_change()


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
