"""When one model's queue refuses a request, and what it tells the refused client.

Each request's longest wait is decided once, at admission (`classify`): an interactive request may
wait what its TTFT budget leaves (gateway.admission.budget), a patient one what it asked for;
either counts from its arrival. An interactive waiter whose budget runs out is refused then (429
`deadline`), never dispatched to miss its target.

Expected wait = (entries served before it + 1) / drain rate, the rate measured by `DrainRate`. Once
that rate is firm, a request whose expected wait exceeds its deadline is refused at once (429
`deadline`), and so is a waiter as soon as the rate says its turn will come too late (a burst that
arrived before the rate was firm); one that waits past its deadline is answered 503 `queue_timeout`.
Until the rate is firm the queue refuses only when full: a cold burst is taken in whole and judged
on evidence, not on the first second of a gateway busy taking it in.

The queue holds `max_depth` waiters, and more while the measured drain rate r serves them within
the timeout T: its bound is max(max_depth, min(r x T, `ELASTIC_LIMIT` x max_depth)). A fixed bound
below r x T refuses work the backends would finish in time, and a refused burst then meets the same
full queue on every return while its backends drain it; the factor keeps memory bounded.

A full queue makes room by pushing out the newest waiter of the tenant furthest over its share
(the bound x its weight / the waiting tenants' weights), so one tenant's flood cannot lock the others
out; a tenant at or over its own share is refused instead (429 `tenant_over_share`), and when no
tenant is over its share the arrival is refused (429 `queue_full`).

Every refusal carries retry advice: the default when no backend serves the model (the health checks
decide when one does) or the gateway is shutting down (another process or replica answers the
retry), else what `RetryAdvice` makes of the expected wait and the rate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Generic

from gateway.admission.advice import RetryAdvice
from gateway.admission.drain import DrainRate
from gateway.admission.rejection import Rejected, RejectReason
from gateway.admission.ticket import L, Ticket
from gateway.admission.waiters import Waiters
from gateway.types import Clock

ELASTIC_LIMIT = 8
"""Most the queue may grow beyond `max_depth`, as a multiple of it, while it drains in time."""

_NOT_DRAIN_BOUND: frozenset[RejectReason] = frozenset({"no_backend", "shutting_down"})
"""Refusals whose retry advice does not depend on how fast this queue drains."""


class Shedding(Generic[L]):
    """The refusal rules and advice of one model's queue, over its waiters and its drain rate."""

    def __init__(
        self,
        model: str,
        waiters: Waiters[L],
        drain: DrainRate,
        clock: Clock,
        *,
        max_depth: int,
        timeout: float,
        default_retry_after: float,
        tenant_timeouts: Mapping[str, float] | None,
        budget: Callable[[str | None], float | None] | None = None,
    ) -> None:
        self.model = model
        self.max_depth = max_depth
        self.timeout = timeout
        self.default_retry_after = default_retry_after
        self.tenant_timeouts = dict(tenant_timeouts or {})
        """Per-tenant cap on the wait, instead of `timeout`."""
        self.rejected: dict[str, int] = {}
        """Refusals per reason since start."""
        self._waiters = waiters
        self._drain = drain
        self._clock = clock
        self._advice = RetryAdvice(floor=default_retry_after)
        self._budget = budget
        """Seconds an interactive request of a tenant arriving now may wait (None: no target counts
        the wait; the tenant None: one with no targets of its own)."""

    # -- arrivals ------------------------------------------------------------------------------

    def bound(self, now: float) -> int:
        """Waiters the queue holds: `max_depth`, or what drains within the timeout if more."""
        rate = self._drain.rate(now)
        if rate is None:
            return self.max_depth
        return max(self.max_depth, min(int(rate * self.timeout), ELASTIC_LIMIT * self.max_depth))

    def classify(self, ticket: Ticket) -> Ticket:
        """`ticket` with its class and longest wait decided (gateway.admission.budget): the wait it
        asked for (`x-queue-timeout`, else its tenant's `queue_timeout`; capped by the tenant's or
        the queue's timeout) if that is longer than the interactive budget, as a patient request;
        else the budget, or the shorter wait it asked for. Without a target that counts the wait,
        the wait it asked for or the queue's timeout, as before. Decided once: a retry keeps it."""
        if ticket.patient is not None and ticket.wait is not None:
            return ticket
        cap = self.tenant_timeouts.get(ticket.tenant, self.timeout)
        asked = cap if ticket.timeout is None else min(ticket.timeout, cap)
        explicit = ticket.timeout is not None or ticket.tenant in self.tenant_timeouts
        budget = self.budget(ticket.tenant)
        if budget is None:
            return ticket.decided(patient=False, wait=asked)
        if explicit and asked > budget:
            return ticket.decided(patient=True, wait=asked)
        if explicit and asked < budget:
            return ticket.decided(patient=False, wait=asked)
        return ticket.decided(patient=False, wait=budget, budgeted=True)

    def budget(self, tenant: str | None = None) -> float | None:
        """Seconds an interactive request of `tenant` arriving now may wait (None: no target counts
        the wait). Its tenant's targets may differ from the model's (gateway.config.sla)."""
        return None if self._budget is None else self._budget(tenant)

    def check_arrival(self, ticket: Ticket, rank: int, limit: float, now: float) -> None:
        """Raise `Rejected` (429 `deadline`) when the request may not wait, or when, at a firm drain
        rate, its turn would come after its deadline (`limit` seconds from now)."""
        fair = self._waiters.fair
        rate = self._drain.rate(now) if self._drain.firm(now) else None
        ahead = 0.0 if rate is None else fair.ahead_of_new(ticket.tenant, rank)
        wait = None if rate is None else self.time_for(ahead + 1, rate)
        what = "time to first token budget" if ticket.budgeted else "deadline"
        if limit <= 0:
            raise self.reject("deadline", wait, f"no free slot for model {self.model!r} within its {what}")
        if wait is not None and wait > limit:
            raise self.reject(
                "deadline",
                wait,
                f"expected queue wait {wait:.2f}s ({ahead:.0f} requests ahead at "
                f"{self.rate_text(now)}) exceeds the {limit:.2f}s left of its {what}",
            )

    def make_room(self, tenant: str, now: float) -> None:
        """Queue full: push out the most over-share tenant's newest waiter, or refuse."""
        fair = self._waiters.fair
        depths = fair.tenant_depths()
        weight = fair.weight
        bound = self.bound(now)
        total = sum(weight(t) for t in depths) + (0.0 if tenant in depths else weight(tenant))
        mine = depths.get(tenant, 0)
        share = bound * weight(tenant) / total
        victim = max(
            (t for t in depths if t != tenant and depths[t] > bound * weight(t) / total),
            key=lambda t: depths[t] / weight(t),
            default=None,
        )
        if victim is not None and mine + 1 <= share:
            entry = fair.newest(victim)
            assert entry is not None
            self._waiters.remove(entry.item)
            if not entry.item.future.done():  # else it was cancelled: its place is free already
                entry.item.future.set_exception(
                    self._over_share(victim, depths[victim], total, now, pushed_out=True)
                )
            return
        others_wait = any(t != tenant for t in depths)
        if others_wait and mine >= share:
            raise self._over_share(tenant, mine, total, now, pushed_out=False)
        raise self.reject(
            "queue_full",
            self.drain_time(fair.depth + 1),
            f"queue for model {self.model!r} is full: {fair.depth} of {bound} "
            f"waiting, draining at {self.rate_text(now)}",
        )

    def _over_share(
        self, tenant: str, depth: int, total_weight: float, now: float, *, pushed_out: bool
    ) -> Rejected:
        fraction = self._waiters.fair.weight(tenant) / total_weight
        rate = self._drain.rate(now)
        # The tenant's own backlog drains at its share of the rate.
        wait = None if rate is None else self.time_for(depth + 1, rate * fraction)
        what = "pushed out of" if pushed_out else "refused by"
        return self.reject(
            "tenant_over_share",
            wait,
            f"{what} the full queue for model {self.model!r}: tenant {tenant!r} holds {depth} "
            f"of {self.bound(now)} places; its share while other tenants wait is "
            f"{self.bound(now) * fraction:.1f}",
        )

    async def advised(self, refused: Rejected) -> Rejected:
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
        wait = self.time_for(self._waiters.depth + 1, rate)
        retry_after = self._advice.advise(now, wait, rate, firm=self._drain.firm(now), horizon=self.timeout)
        return Rejected(refused.reason, retry_after=retry_after, message=refused.message)

    # -- waiters -------------------------------------------------------------------------------

    def expire(self, now: float) -> bool:
        """Answer 503 `queue_timeout` each waiter past its deadline; True if any left the queue."""
        expired = False
        for waiter in self._waiters.overdue(now):
            expired = True
            if waiter.future.done():
                continue
            depth = self._waiters.depth
            waited = f"waited {now - waiter.enqueued_at:.1f}s in the queue for model {self.model!r}"
            if waiter.ticket.budgeted:
                # Dispatched now, its first token would come after the target: refused instead.
                refusal = self.reject(
                    "deadline",
                    self.drain_time(depth + 1),
                    f"{waited}: its time to first token budget ran out ({depth} still waiting, "
                    f"draining at {self.rate_text(now)})",
                )
            else:
                refusal = self.reject(
                    "queue_timeout",
                    self.drain_time(depth + 1),
                    f"{waited} without a free slot ({depth} still waiting, draining at "
                    f"{self.rate_text(now)})",
                )
            waiter.future.set_exception(refusal)
        return expired

    def trim(self, now: float) -> bool:
        """Refuse (429 `deadline`) each tenant's newest waiters while, at the measured drain rate,
        their turn would come after their deadline.

        Admission makes the same test, but only once the drain rate is firm: a burst into a cold
        queue is let in whole, and without this its tail would wait out the full timeout for a 503.
        The newest waiter of a tenant is served after about as many entries as a new arrival of that
        tenant would be (`ahead_of_new`). Cheap when nothing can be late: if the whole queue drains
        before the earliest deadline, nothing is scanned.
        """
        fair = self._waiters.fair
        earliest = self._waiters.earliest_deadline()
        if not fair.depth or earliest is None or not self._drain.firm(now):
            return False
        rate = self._drain.rate(now)
        if rate is None or rate <= 0 or self.time_for(fair.depth, rate) <= earliest - now:
            return False
        trimmed = False
        for tenant in list(fair.tenant_depths()):
            while (entry := fair.newest(tenant)) is not None:
                waiter = entry.item
                ahead = fair.ahead_of_new(tenant, entry.priority)
                wait, left = self.time_for(ahead, rate), waiter.deadline - now
                if wait <= left:
                    break
                self._waiters.remove(waiter)
                trimmed = True
                if not waiter.future.done():
                    waiter.future.set_exception(self._late(wait, ahead, left, now))
        return trimmed

    def _late(self, wait: float, ahead: float, left: float, now: float) -> Rejected:
        return self.reject(
            "deadline",
            wait,
            f"expected queue wait {wait:.1f}s ({ahead - 1:.0f} requests ahead at "
            f"{self.rate_text(now)}) exceeds the {left:.1f}s left of its deadline",
        )

    def no_other_backend(self, exclude: frozenset[str]) -> Rejected:
        """A retry whose turn came while only the backends that failed it had room."""
        return self.reject(
            "no_backend",
            None,
            f"no backend other than {', '.join(sorted(exclude))} has room for model {self.model!r}",
        )

    # -- refusals and estimates ----------------------------------------------------------------

    def reject(self, reason: RejectReason, wait: float | None, message: str) -> Rejected:
        """A refusal with its advice (see the module doc), counted under its reason."""
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        if reason in _NOT_DRAIN_BOUND:
            retry_after = self.default_retry_after
        else:
            now = self._clock()
            rate = self._drain.rate(now)
            retry_after = self._advice.advise(
                now, wait, rate, firm=self._drain.firm(now), horizon=self.timeout
            )
        return Rejected(reason, retry_after=retry_after, message=message)

    def drain_time(self, n: float) -> float | None:
        """Seconds for `n` entries to be served at the measured rate; None before it is measured."""
        rate = self._drain.rate(self._clock())
        return None if rate is None else self.time_for(n, rate)

    @staticmethod
    def time_for(n: float, rate: float) -> float:
        return n / rate if rate > 0 else float("inf")

    def rate_text(self, now: float) -> str:
        rate = self._drain.rate(now)
        return "an unmeasured rate" if rate is None else f"{rate:.2f} requests/s"
