"""The gauges, read from the running gateway when /metrics is scraped (a prometheus_client collector).

Reading live state at scrape keeps the request path free of gauge updates, and a backend that leaves
the pool leaves the exposition with it. Each gauge is one row of a table below (name, help, reader),
so a new one is one line. Counts kept elsewhere (vLLM's prefix-cache counters, the prefix index's)
are exported as counters showing the highest total seen: a counter never goes down, so a reset of the
source (a backend restart, a new routing strategy) reads as no growth until it passes that total.
Without a gateway to read (`read_from` not called yet) every family is still described, empty.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.metrics.view import BackendView, GatewayView, IndexView
from gateway.types import SIGNALS, Signal


@dataclass(frozen=True, slots=True)
class Reading:
    """One backend as one scrape sees it."""

    backend: BackendView
    now: float
    index: IndexView | None
    """The routing strategy's prefix index for the backend; None for a strategy without one."""
    p90: Mapping[Signal, float]
    """The limiter's window P90s (computed once per scrape)."""

    def latency_floor(self) -> dict[Signal, float] | None:
        decision = self.backend.limiter.last_decision
        return None if decision is None else decision.latency_floor


Reader = Callable[[Reading], float | None]
"""A gauge's value for one backend; None leaves the series out."""

BACKEND_GAUGES: tuple[tuple[str, str, Reader], ...] = (
    (
        "gateway_inflight_requests",
        "Requests dispatched to a backend and not yet finished.",
        lambda r: r.backend.limiter.inflight,
    ),
    (
        "gateway_batch_inflight_requests",
        "Batch lines dispatched to a backend and not yet finished (part of gateway_inflight_requests).",
        lambda r: r.backend.background_inflight,
    ),
    ("gateway_concurrency_limit", "Current adaptive concurrency limit.", lambda r: r.backend.limiter.limit),
    (
        "gateway_concurrency_ceiling",
        "Upper bound on the limit: KV-cache derived or configured max_concurrency.",
        lambda r: r.backend.limiter.ceiling,
    ),
    (
        "gateway_concurrency_floor",
        "Lower bound on the limit (min_concurrency).",
        lambda r: r.backend.limiter.floor,
    ),
    (
        "gateway_backend_up",
        "1 when the backend is healthy and in rotation.",
        lambda r: 1 if r.backend.in_rotation(r.now) else 0,
    ),
    (
        "gateway_sla_infeasible",
        "1 while the controller has measured that no limit meets the SLA on this backend.",
        lambda r: 0 if r.latency_floor() is None else 1,
    ),
    (
        "gateway_backend_kv_cache_usage_ratio",
        "KV-cache usage scraped from vLLM (0..1).",
        lambda r: None if r.backend.engine_stats is None else r.backend.engine_stats.kv_usage,
    ),
    (
        "gateway_backend_waiting_requests",
        "Requests waiting inside vLLM (scraped).",
        lambda r: None if r.backend.engine_stats is None else r.backend.engine_stats.waiting,
    ),
    (
        "gateway_prefix_index_chunks",
        "Prompt chunks the prefix index expects the backend to hold in its prefix cache.",
        lambda r: None if r.index is None else r.index.chunks,
    ),
)

SignalReader = Callable[[Reading, Signal], float | None]

BACKEND_SIGNAL_GAUGES: tuple[tuple[str, str, SignalReader], ...] = (
    (
        "gateway_latency_p90_seconds",
        "Window P90 latency measured at the gateway.",
        lambda r, s: r.p90.get(s),
    ),
    (
        "gateway_backend_target_seconds",
        "Engine-side P90 target the controller holds the backend to: the strictest client target of "
        "its models, TTFT and e2e times (1 - sla.queue_share), TPOT whole; only signals with a target.",
        lambda r, s: r.backend.limiter.sla.target(s),
    ),
    (
        "gateway_latency_floor_seconds",
        "Latency the limit does not control, per signal, while the SLA is infeasible (else 0).",
        lambda r, s: (r.latency_floor() or {}).get(s, 0.0),
    ),
)

BACKEND_TOTALS: tuple[tuple[str, str, Reader], ...] = (
    (
        "gateway_backend_prefix_cache_queries",
        "Tokens the backend looked up in its prefix cache (vLLM's counter, since the gateway started).",
        lambda r: r.backend.prefix_queries,
    ),
    (
        "gateway_backend_prefix_cache_hits",
        "Tokens the backend found in its prefix cache (vLLM's counter, since the gateway started).",
        lambda r: r.backend.prefix_hits,
    ),
    (
        "gateway_prefix_index_queries",
        "Prompt chunks routed to the backend by the prefix strategy.",
        lambda r: None if r.index is None else r.index.queried,
    ),
    (
        "gateway_prefix_index_hits",
        "Prompt chunks routed to the backend that the prefix index expected cached there.",
        lambda r: None if r.index is None else r.index.hits,
    ),
)


class LiveGauges(Collector):
    def __init__(self, *, coordination: bool) -> None:
        """`coordination`: export the shared-state gauges (only with state.redis_url, so that the
        alert on them cannot fire for a gateway that shares nothing)."""
        self._coordination = coordination
        self._gateway: GatewayView | None = None
        self._highest: dict[tuple[str, str], tuple[float, float]] = {}
        """(family, backend) -> (highest total seen, wall time it was first seen), for BACKEND_TOTALS."""

    def read_from(self, gateway: GatewayView) -> None:
        self._gateway = gateway

    def collect(self) -> Iterator[Metric]:
        gw = self._gateway
        readings = [] if gw is None else _readings(gw)
        yield from _backend_gauges(readings)
        yield from self._backend_totals(readings)
        yield from _config_gauges(gw)
        yield from _admission_gauges(gw)
        yield from _batch_gauges(gw)
        if self._coordination:
            yield from _coordination_gauges(gw)

    def _backend_totals(self, readings: list[Reading]) -> Iterator[Metric]:
        for name, doc, read in BACKEND_TOTALS:
            for r in readings:
                total = read(r)
                key = (name, r.backend.name)
                seen = self._highest.get(key)
                if total is not None and total > (0.0 if seen is None else seen[0]):
                    self._highest[key] = (total, time.time() if seen is None else seen[1])
            family = CounterMetricFamily(name, doc, labels=["backend"])
            for (family_name, backend), (total, created) in self._highest.items():
                if family_name == name:
                    family.add_metric([backend], total, created=created)
            yield family


def _readings(gw: GatewayView) -> list[Reading]:
    now = gw.clock()
    strategy = gw.pool.strategy
    return [
        Reading(b, now, strategy.report(b.name, b.cache_epoch), b.limiter.p90()) for b in gw.pool.backends
    ]


def _backend_gauges(readings: list[Reading]) -> Iterator[Metric]:
    for name, doc, read in BACKEND_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=["backend"])
        for r in readings:
            if (value := read(r)) is not None:
                family.add_metric([r.backend.name], value)
        yield family
    for name, doc, read_signal in BACKEND_SIGNAL_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=["backend", "signal"])
        for r in readings:
            for signal in SIGNALS:
                if (value := read_signal(r, signal)) is not None:
                    family.add_metric([r.backend.name, signal], value)
        yield family


def _config_gauges(gw: GatewayView | None) -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "gateway_sla_target_seconds", "Configured P90 latency target.", labels=["signal"]
    )
    for signal, target in ({} if gw is None else gw.config.sla.targets()).items():
        family.add_metric([signal], target)
    yield family


def _admission_gauges(gw: GatewayView | None) -> Iterator[Metric]:
    depth = GaugeMetricFamily(
        "gateway_queue_depth", "Requests waiting in the gateway's admission queue.", labels=["model"]
    )
    exhausted = GaugeMetricFamily(
        "gateway_capacity_exhausted",
        "1 while every healthy backend for the model is at its limit and requests wait.",
        labels=["model"],
    )
    for model, q in ({} if gw is None else gw.queues.by_model).items():
        depth.add_metric([model], q.depth)
        exhausted.add_metric([model], 1 if gw is not None and gw.queues.capacity_exhausted(model) else 0)
    yield depth
    yield exhausted


def _batch_gauges(gw: GatewayView | None) -> Iterator[Metric]:
    progress = None if gw is None or gw.batches is None else gw.batches.progress
    by_status = GaugeMetricFamily("gateway_batches", "Batches (Batch API) by status.", labels=["status"])
    if progress is not None:
        for status, count in progress.by_status().items():
            by_status.add_metric([status], count)
    yield by_status
    yield GaugeMetricFamily(
        "gateway_batch_lines_pending",
        "Lines of unfinished batches not answered yet.",
        value=0 if progress is None else progress.pending(),
    )


def _coordination_gauges(gw: GatewayView | None) -> Iterator[Metric]:
    fallback = None if gw is None or gw.coordinator is None else gw.coordinator.fallback
    yield GaugeMetricFamily(
        "gateway_coordination_up",
        "1 while this process shares admission state through Redis; 0 while it admits on its "
        "local share because Redis is unreachable.",
        value=0 if fallback is None else (1 if fallback.shared else 0),
    )
    yield GaugeMetricFamily(
        "gateway_coordination_replicas",
        "Gateway processes sharing state at the last contact with Redis (the fallback divides by it).",
        value=0 if fallback is None else fallback.replicas,
    )
