"""The document `GET /admin/state` answers: the running gateway as an operator debugs it.

Per backend its health, limiter and prefix-cache view; per model its queue; the shared state and
the batches when they are on. Hit rates are rounded ratios, None before anything was counted.
Moments are wall-clock times in ISO 8601, UTC (`..._at`), beside their age in seconds
(`..._seconds_ago`): the gateway keeps time on a monotonic clock that means nothing outside the
process, and an operator lines the document up with logs and dashboards.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from gateway.admission.model_queues import ModelQueues
from gateway.config import GatewayConfig
from gateway.pool.backends import Backend
from gateway.pool.pool import Pool
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
        started_at: float,
        coordinator: Describes | None,
        batches: Describes | None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._pool = pool
        self._queues = queues
        self._clock = clock
        self._wall = wall
        self._coordinator = coordinator
        self._batches = batches
        self._started_at = started_at

    def document(self, config: GatewayConfig) -> dict[str, object]:
        """The document under `config`, the one in force (a reload replaces it)."""
        now, wall = self._clock(), self._wall()
        strategy = self._pool.strategy
        return {
            "time": iso_time(wall),
            "started_at": iso_time(wall - (now - self._started_at)),
            "uptime_seconds": round(now - self._started_at, 3),
            "algorithm": config.controller.algorithm,
            "routing": config.routing.strategy,
            "sla": config.sla.targets(),
            "backends": [
                {**wall_times(b.state(now), now, wall), "prefix_cache": prefix_state(b, strategy)}
                for b in self._pool.backends
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


def iso_time(wall: float) -> str:
    """A Unix time as ISO 8601 in UTC, to the millisecond: 2026-12-02T05:30:01.123Z."""
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def wall_times(state: dict[str, object], now: float, wall: float) -> dict[str, object]:
    """`state` with its process-clock `last_change_at` as a wall-clock time and an age."""
    at = state.get("last_change_at")
    if isinstance(at, int | float):
        state["last_change_at"] = iso_time(wall - (now - at))
        state["last_change_seconds_ago"] = round(now - at, 3)
    return state


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
