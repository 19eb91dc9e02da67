"""What a request brings to admission (`Ticket`), and what admission needs of the pool (`SlotSource`).

Admission does not import the pool (gateway.pool.pool): it sees it through `SlotSource`, so the queue's
rules can be tested against a counting stand-in. The protocol is generic in the lease type, so a
queue over the real pool hands out the pool's own `Lease` and no caller has to cast it back.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from gateway.routing import RouteKey
from gateway.types import Sample


class Releasable(Protocol):
    """A hold on one backend slot, released exactly once."""

    def release(self, sample: Sample | None) -> None: ...


L = TypeVar("L", bound=Releasable)
L_co = TypeVar("L_co", bound=Releasable, covariant=True)


class SlotSource(Protocol[L_co]):
    """The backend pool, as admission sees it."""

    def pick(
        self,
        model: str,
        routes: Sequence[RouteKey | None],
        *,
        exclude: Collection[str] = (),
        background: bool = False,
    ) -> tuple[int, L_co] | None:
        """Which of these requests takes a free slot (its index), and its lease; None if no room.
        No backend named in `exclude` is chosen."""

    def available(self, model: str, *, exclude: Collection[str] = ()) -> bool:
        """Some healthy backend, none of `exclude`, serves the model."""

    def has_room(self, model: str, *, background: bool = False) -> bool:
        """Some healthy backend serving the model has a free slot (for a batch line: one it may take)."""


@dataclass(frozen=True, slots=True)
class Ticket:
    tenant: str
    priority: int = 0
    """Higher is served first."""
    timeout: float | None = None
    """Longest wait this request accepts, capped by its tenant's or the queue's timeout."""
    request_id: str | None = None
    route: RouteKey | None = None
    """What the pool routes the request by (its prompt's prefix, its session)."""
    background: bool = False
    """A batch line: served only when no interactive request waits, never shed for its wait."""
    exclude: frozenset[str] = frozenset()
    """Backends this request must not be sent to: those that failed it already (a retry)."""
    arrived: float | None = None
    """Clock time the request reached the gateway: its waits, a retry's too, count from here."""
    patient: bool | None = None
    """Decided once, at admission (gateway.admission.budget): True for a request that would rather
    wait than be refused; None until then."""
    wait: float | None = None
    """Longest wait from `arrived`, decided with `patient`: its budget, or the wait it asked for."""
    budgeted: bool = False
    """`wait` is its SLA budget: running out of it is a refusal (429), not a queue timeout (503)."""
    prompt_tokens: int = 0
    """Estimated prompt tokens: what its tenant is charged for it at dispatch (fair sharing)."""
    most_tokens: int | None = None
    """Prompt and output tokens one of its sequences holds at most, if it says (its `max_tokens`):
    what the backend's KV cache must hold for it whole (gateway.control.ceiling)."""

    def decided(self, *, patient: bool, wait: float, budgeted: bool = False) -> Ticket:
        """This ticket with its class and longest wait decided (gateway.admission.budget). Built
        field by field: `dataclasses.replace` costs half again as much, once per request."""
        return Ticket(
            tenant=self.tenant,
            priority=self.priority,
            timeout=self.timeout,
            request_id=self.request_id,
            route=self.route,
            background=self.background,
            exclude=self.exclude,
            arrived=self.arrived,
            patient=patient,
            wait=wait,
            budgeted=budgeted,
            prompt_tokens=self.prompt_tokens,
            most_tokens=self.most_tokens,
        )
