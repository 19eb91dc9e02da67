"""How long an interactive request may wait in the queue and still meet its SLA (its model's, with
its tenant's own targets in place of the model's: gateway.config.sla).

The SLA is the client's: its TTFT (and e2e) as the client sees it is the wait in the gateway's
queue plus the engine's. For each such target T, with E the engine's P90 of that signal (the
worst over the backends that may serve the request) and q the queue's share of the budget
(`sla.queue_share`), the queue may hold the request for

    budget = T - min(E, (1 - q) T) = max(q T, T - E)

and the least over its targets. An engine not measured yet is taken at its share, E = (1 - q) T,
the value the controller holds it to: read as 0, a fresh gateway's first requests could wait the
whole target and be served late whatever the engine did. The P90, the SLA's own quantile: a
request admitted is one that, waiting its whole budget, still meets its target nine times in ten.
Under overload the queue stays at its bound and every request served waits about its budget, so
the share of them that meets the target is the engine's chance of adding at most T - budget: at
the median, half the engine's work would go to answers that miss. The controller holds the
engine's P90 at (1 - q) T (gateway.config.sla), so the queue gets at least q T and whatever the
engine leaves beyond; an engine over its share does not take the queue's: its limit is the
controller's to bring down, and refusing every request that must wait would only starve the
engine. An admitted request whose predicted wait exceeds its budget is refused at once, and one
still waiting when its budget runs out is refused then: dispatched, its first token would come
after the target, taking a slot a request that can still meet the SLA could have had
(gateway.admission.shedding).

Requests that would rather wait say so (`x-queue-timeout`, or their tenant's `queue_timeout`,
longer than the budget): they are patient, wait up to what they asked, and rank below every
interactive request (`PATIENT_SHIFT`), so they take no capacity from the interactive class and
their waits are not judged against its SLA.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.types import SLA, Signal

QUEUED: tuple[Signal, ...] = ("ttft", "e2e")
"""Signals whose client-side value includes the wait in the gateway's queue."""

PATIENT_SHIFT = 1_000_000
"""Patient requests queue at their priority minus this: below every interactive priority class."""


def wait_budget(sla: SLA, engine: Mapping[Signal, float], queue_share: float) -> float | None:
    """Seconds an interactive request may wait in the queue (see the module doc); None when its
    SLA has no target the wait counts toward."""
    budget: float | None = None
    for signal in QUEUED:
        target = sla.target(signal)
        if target is None:
            continue
        share = (1.0 - queue_share) * target
        left = target - min(engine.get(signal, share), share)
        budget = left if budget is None else min(budget, left)
    return budget


def rank(priority: int, patient: bool) -> int:
    """Where a request queues: its priority, shifted below every interactive class if patient."""
    return priority - PATIENT_SHIFT if patient else priority
