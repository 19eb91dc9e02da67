"""The pool plus one admission queue per model: who gets the next free slot, and when.

Queues are made on first use, since models are discovered at run time. When a backend frees a slot,
raises its limit or comes back, only the queues of the models it serves are woken: a freed slot
through the pool's hand-off, which these queues take (`Lease.release`, gateway.pool.backends), the
rest through `wake` from whoever raised the room (the control tick in gateway.runtime.loops,
the health check and scrape in gateway.pool.monitor).
"""

from __future__ import annotations

from gateway.admission import AdmissionQueue
from gateway.admission.budget import wait_budget
from gateway.admission.fairness import Pricing
from gateway.config import GatewayConfig
from gateway.pool.backends import Backend, Lease
from gateway.pool.pool import Pool
from gateway.types import Clock


class ModelQueues:
    def __init__(self, pool: Pool, config: GatewayConfig, clock: Clock) -> None:
        self.pool = pool
        self._config = config
        self._clock = clock
        self._weights = {t.name: t.weight for t in config.tenants}
        self._timeouts = {t.name: t.queue_timeout for t in config.tenants if t.queue_timeout is not None}
        self.by_model: dict[str, AdmissionQueue[Lease]] = {}
        pool.hand_off = self.wake

    def queue(self, model: str) -> AdmissionQueue[Lease]:
        q = self.by_model.get(model)
        if q is None:
            q = AdmissionQueue(
                model,
                self.pool,
                clock=self._clock,
                max_depth=self._config.queue.max_depth,
                timeout=self._config.queue.timeout,
                tenant_weights=self._weights,
                lookahead=self._config.routing.lookahead,
                tenant_timeouts=self._timeouts,
                budget=lambda tenant: self.budget(model, tenant),
                pricing=pricing_of(self._config),
            )
            self.by_model[model] = q
        return q

    def budget(self, model: str, tenant: str | None = None) -> float | None:
        """Seconds an interactive request of `tenant` for `model` arriving now may wait in the queue:
        from its merged SLA (`GatewayConfig.sla_for`), read from the config in force now."""
        config = self._config
        sla = config.sla_for(model, tenant)
        return wait_budget(sla, self.pool.engine_p90(model), config.queue_share)

    def reconfigure(self, config: GatewayConfig) -> None:
        """A reloaded config: new bounds and weights for every queue, then a look at each.

        Waiters for a model no configured backend serves any more are answered 503 at once; a model
        whose backends are only new (not yet checked) keeps its waiters for them.
        """
        self._config = config
        self._weights = {t.name: t.weight for t in config.tenants}
        self._timeouts = {t.name: t.queue_timeout for t in config.tenants if t.queue_timeout is not None}
        for model, q in self.by_model.items():
            q.reconfigure(config.queue.max_depth, config.queue.timeout, self._weights, self._timeouts)
            q.lookahead = config.routing.lookahead
            q.set_pricing(pricing_of(config))
            if not self.pool.known(model) and not self.pool.undiscovered():
                q.close(f"no backend serves model {model!r} since the config was reloaded", "no_backend")
            else:
                q.wake()

    def wake(self, backend: Backend) -> None:
        for model in backend.models:
            q = self.by_model.get(model)
            if q is not None and (q.depth or q.background.depth):
                q.wake()

    def queued_for(self, backend: Backend) -> int:
        """Requests waiting for this backend's models, batch lines included: demand the limit can
        serve if latency allows."""
        return sum(q.depth + q.background.depth for m, q in self.by_model.items() if m in backend.models)

    def capacity_exhausted(self, model: str) -> bool:
        q = self.by_model.get(model)
        return q is not None and q.depth > 0 and self.pool.all_busy(model)


def pricing_of(config: GatewayConfig) -> Pricing:
    """The fair queue's prices from the `fairness` section."""
    f = config.fairness
    return Pricing("requests" if f.cost == "requests" else "tokens", f.prompt_weight, f.output_weight)
