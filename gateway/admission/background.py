"""The background class of one model's admission queue: batch lines waiting for spare capacity.

A background waiter gets a slot only when no interactive request waits for one (the queue calls
`dispatch` only then), and the pool hands it only a slot that interactive traffic has not used
lately (`SlotSource.pick(background=True)`): so a batch fills the capacity interactive traffic
leaves, up to the controller's limit, and an interactive request never waits behind a batch line.

Background waiters have no deadline and are never shed for their wait: a batch line can wait as
long as its batch's completion window, which the batch runner enforces by cancelling it. Between
tenants, the waiters are served by the same weighted fair queueing as interactive ones; within a
tenant, first come first served. Their dispatches are not counted in the queue's drain rate, which
estimates interactive waits. A retried line (`Ticket.exclude`) whose turn comes while only the
backends that failed it have spare room is refused, as an interactive retry is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Generic

from gateway.admission.fairness import Entry, FairQueue
from gateway.admission.ticket import L, SlotSource, Ticket


class BackgroundLane(Generic[L]):
    def __init__(
        self,
        model: str,
        source: SlotSource[L],
        fair: FairQueue[tuple[asyncio.Future[L], Ticket]],
        no_other_backend: Callable[[frozenset[str]], Exception],
    ):
        self.model = model
        self.admitted = 0
        self._source = source
        self.fair = fair
        self._no_other_backend = no_other_backend
        """The refusal of a retry that only the backends that failed it have room for."""

    @property
    def depth(self) -> int:
        return self.fair.depth

    def next_tenant(self) -> str | None:
        entry = self.fair.peek()
        return entry.tenant if entry is not None else None

    def set_weights(self, weights: Mapping[str, float]) -> None:
        self.fair.set_weights(weights)

    async def admit(self, ticket: Ticket, *, interactive_waiting: bool) -> L:
        """A lease on a slot no interactive request wants; waits, without a deadline, for one."""
        if not interactive_waiting and not self.fair.depth:
            got = self._source.pick(self.model, (ticket.route,), exclude=ticket.exclude, background=True)
            if got is not None:
                self.admitted += 1
                self.fair.served(ticket.tenant, ticket.priority, ticket.prompt_tokens)
                return got[1]
        future: asyncio.Future[L] = asyncio.get_running_loop().create_future()
        entry = self.fair.push((future, ticket), ticket.tenant, ticket.priority, ticket.prompt_tokens)
        if not interactive_waiting:
            self.dispatch()
        try:
            return await future
        except asyncio.CancelledError:
            self._abandon(entry)
            raise

    def dispatch(self) -> int:
        """Hand slots to waiters while the pool has spare ones. Call only when no interactive
        request waits."""
        n = 0
        while (entry := self.fair.peek()) is not None:
            future, ticket = entry.item
            if future.done():  # cancelled; its task has not resumed yet
                self.fair.remove(entry)
                continue
            got = self._source.pick(self.model, (ticket.route,), exclude=ticket.exclude, background=True)
            if got is None:
                if not ticket.exclude or not self._source.has_room(self.model, background=True):
                    break
                self.fair.remove(entry)
                future.set_exception(self._no_other_backend(ticket.exclude))
                continue
            self.fair.pop()
            future.set_result(got[1])
            n += 1
        self.admitted += n
        return n

    def close(self, error: Exception) -> None:
        """Answer every waiter with `error` (the gateway is shutting down)."""
        while (entry := self.fair.peek()) is not None:
            self.fair.remove(entry)
            if not entry.item[0].done():
                entry.item[0].set_exception(error)

    def _abandon(self, entry: Entry[tuple[asyncio.Future[L], Ticket]]) -> None:
        future = entry.item[0]
        if entry.live:
            self.fair.remove(entry)
        elif not future.cancelled() and future.done() and future.exception() is None:
            # Granted in the same tick as the cancellation: the slot goes back to the pool.
            future.result().release(None)
