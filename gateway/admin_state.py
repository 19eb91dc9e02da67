"""The document `GET /admin/state` answers: the running gateway as an operator debugs it.

Per backend its health, limiter and prefix-cache view; per model its queue; the shared state and
the batches when they are on. Hit rates are rounded ratios, None before anything was counted.
"""

from __future__ import annotations

from typing import Protocol

from gateway.backends import Backend, Pool
from gateway.config import GatewayConfig
from gateway.model_queues import ModelQueues
from gateway.routing import Strategy
from gateway.types import Clock


class Describes(Protocol):
    def state(self) -> dict[str, object]: ...


class Running(Protocol):
    """What the document reads from the running gateway (gateway.app.Gateway)."""

    @property
    def config(self) -> GatewayConfig: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def started_at(self) -> float: ...
    @property
    def pool(self) -> Pool: ...
    @property
    def queues(self) -> ModelQueues: ...
    @property
    def coordinator(self) -> Describes | None: ...
    @property
    def batches(self) -> Describes | None: ...


def admin_state(gw: Running) -> dict[str, object]:
    now = gw.clock()
    strategy = gw.pool.strategy
    return {
        "uptime_seconds": round(now - gw.started_at, 3),
        "algorithm": gw.config.controller.algorithm,
        "routing": gw.config.routing.strategy,
        "sla": gw.config.sla.targets(),
        "backends": [{**b.state(now), "prefix_cache": prefix_state(b, strategy)} for b in gw.pool.backends],
        "models": {
            model: {**q.state(), "capacity_exhausted": gw.queues.capacity_exhausted(model)}
            for model, q in gw.queues.by_model.items()
        },
        "coordination": None if gw.coordinator is None else gw.coordinator.state(),
        "batches": None if gw.batches is None else gw.batches.state(),
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
