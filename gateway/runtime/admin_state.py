"""The document `GET /admin/state` answers: the running gateway as an operator debugs it.

Per backend its health, limiter and prefix-cache view; per model its queue; the shared state and
the batches when they are on. Hit rates are rounded ratios, None before anything was counted.
"""

from __future__ import annotations

from typing import Protocol

from gateway.admission.model_queues import ModelQueues
from gateway.config import GatewayConfig
from gateway.pool.backends import Backend, Pool
from gateway.routing import Strategy
from gateway.types import Clock


class Describes(Protocol):
    def state(self) -> dict[str, object]: ...


class AdminState:
    def __init__(
        self,
        pool: Pool,
        queues: ModelQueues,
        *,
        clock: Clock,
        coordinator: Describes | None,
        batches: Describes | None,
    ) -> None:
        self._pool = pool
        self._queues = queues
        self._clock = clock
        self._coordinator = coordinator
        self._batches = batches
        self._started_at = clock()

    def document(self, config: GatewayConfig) -> dict[str, object]:
        """The document under `config`, the one in force (a reload replaces it)."""
        now = self._clock()
        strategy = self._pool.strategy
        return {
            "uptime_seconds": round(now - self._started_at, 3),
            "algorithm": config.controller.algorithm,
            "routing": config.routing.strategy,
            "sla": config.sla.targets(),
            "backends": [
                {**b.state(now), "prefix_cache": prefix_state(b, strategy)} for b in self._pool.backends
            ],
            "models": {
                model: {
                    **q.state(),
                    "capacity_exhausted": self._queues.capacity_exhausted(model),
                    "sla": config.sla_for(model).targets(),
                }
                for model, q in self._queues.by_model.items()
            },
            "coordination": None if self._coordinator is None else self._coordinator.state(),
            "batches": None if self._batches is None else self._batches.state(),
        }


def prefix_state(backend: Backend, strategy: Strategy) -> dict[str, object]:
    """The backend's own prefix-cache hit rate (vLLM's counters), and the index's view of it."""
    out: dict[str, object] = {
        "backend_hit_rate": _ratio(backend.prefix_hits, backend.prefix_queries),
        "backend_queried_tokens": backend.prefix_queries,
    }
    index = strategy.report(backend.name, backend.cache_epoch)
    if index is not None:
        out["index_chunks"] = index.chunks
        out["index_queried_chunks"] = index.queried
        out["index_hit_rate"] = _ratio(index.hits, index.queried)
    return out


def _ratio(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole else None
