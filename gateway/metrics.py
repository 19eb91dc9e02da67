"""The gateway's Prometheus metrics: the only module that imports prometheus_client.

One registry per gateway instance (never the process-global default), so tests and several gateways in
one process do not collide. Children for hot-path label sets are cached by the callers that use them.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway.types import SLA

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Latency buckets for LLM requests: tens of milliseconds up to several minutes.
_LATENCY_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
_WAIT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    20.0,
    30.0,
    60.0,
    120.0,
)
_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self, *, coordination: bool = False) -> None:
        """`coordination`: export the shared-state gauges (only with state.redis_url, so that the
        alert on them cannot fire for a gateway that shares nothing)."""
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "gateway_requests",
            "Requests answered, by model, backend and HTTP status.",
            ["model", "backend", "status"],
            registry=r,
        )
        self.rejected = Counter(
            "gateway_rejected_requests",
            "Requests shed by the gateway, by model and reason.",
            ["model", "reason"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "gateway_queue_depth", "Requests waiting in the gateway's admission queue.", ["model"], registry=r
        )
        self.queue_wait = Histogram(
            "gateway_queue_wait_seconds",
            "Time requests spent in the admission queue.",
            ["model"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.inflight = Gauge(
            "gateway_inflight_requests",
            "Requests dispatched to a backend and not yet finished.",
            ["backend"],
            registry=r,
        )
        self.limit = Gauge(
            "gateway_concurrency_limit", "Current adaptive concurrency limit.", ["backend"], registry=r
        )
        self.ceiling = Gauge(
            "gateway_concurrency_ceiling",
            "Upper bound on the limit: KV-cache derived or configured max_concurrency.",
            ["backend"],
            registry=r,
        )
        self.floor = Gauge(
            "gateway_concurrency_floor",
            "Lower bound on the limit (min_concurrency).",
            ["backend"],
            registry=r,
        )
        self.latency_p90 = Gauge(
            "gateway_latency_p90_seconds",
            "Window P90 latency measured at the gateway.",
            ["backend", "signal"],
            registry=r,
        )
        self.sla_infeasible = Gauge(
            "gateway_sla_infeasible",
            "1 while the controller has measured that no limit meets the SLA on this backend.",
            ["backend"],
            registry=r,
        )
        self.latency_floor = Gauge(
            "gateway_latency_floor_seconds",
            "Latency the limit does not control, per signal, while the SLA is infeasible (else 0).",
            ["backend", "signal"],
            registry=r,
        )
        self.sla_target = Gauge(
            "gateway_sla_target_seconds", "Configured P90 latency target.", ["signal"], registry=r
        )
        self.ttft = Histogram(
            "gateway_time_to_first_token_seconds",
            "Time to first token as the client saw it, queueing included (streaming requests).",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "gateway_request_duration_seconds",
            "Request duration as the client saw it.",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.backend_up = Gauge(
            "gateway_backend_up", "1 when the backend is healthy and in rotation.", ["backend"], registry=r
        )
        self.kv_usage = Gauge(
            "gateway_backend_kv_cache_usage_ratio",
            "KV-cache usage scraped from vLLM (0..1).",
            ["backend"],
            registry=r,
        )
        self.waiting = Gauge(
            "gateway_backend_waiting_requests",
            "Requests waiting inside vLLM (scraped).",
            ["backend"],
            registry=r,
        )
        self.capacity_exhausted = Gauge(
            "gateway_capacity_exhausted",
            "1 while every healthy backend for the model is at its limit and requests wait.",
            ["model"],
            registry=r,
        )
        self.adjustments = Counter(
            "gateway_controller_adjustments",
            "Limit changes made by the controller.",
            ["backend", "direction", "reason"],
            registry=r,
        )
        self.loop_lag = Histogram(
            "gateway_event_loop_lag_seconds",
            "How late the event loop ran a timer: time every request waits before it is looked at.",
            buckets=_LAG_BUCKETS,
            registry=r,
        )

        self.coordination_up: Gauge | None = None
        self.coordination_replicas: Gauge | None = None
        if coordination:
            self.coordination_up = Gauge(
                "gateway_coordination_up",
                "1 while this process shares admission state through Redis; 0 while it admits on its "
                "local share because Redis is unreachable.",
                registry=r,
            )
            self.coordination_replicas = Gauge(
                "gateway_coordination_replicas",
                "Gateway processes sharing state at the last contact with Redis (the fallback divides "
                "by it).",
                registry=r,
            )

        self.prefix_index_chunks = Gauge(
            "gateway_prefix_index_chunks",
            "Prompt chunks the prefix index expects the backend to hold in its prefix cache.",
            ["backend"],
            registry=r,
        )
        self.prefix_index_queries = Counter(
            "gateway_prefix_index_queries",
            "Prompt chunks routed to the backend by the prefix strategy.",
            ["backend"],
            registry=r,
        )
        self.prefix_index_hits = Counter(
            "gateway_prefix_index_hits",
            "Prompt chunks routed to the backend that the prefix index expected cached there.",
            ["backend"],
            registry=r,
        )
        self.backend_prefix_queries = Counter(
            "gateway_backend_prefix_cache_queries",
            "Tokens the backend looked up in its prefix cache (vLLM's counter, since the gateway started).",
            ["backend"],
            registry=r,
        )
        self.backend_prefix_hits = Counter(
            "gateway_backend_prefix_cache_hits",
            "Tokens the backend found in its prefix cache (vLLM's counter, since the gateway started).",
            ["backend"],
            registry=r,
        )
        self.batch_inflight = Gauge(
            "gateway_batch_inflight_requests",
            "Batch lines dispatched to a backend and not yet finished (part of gateway_inflight_requests).",
            ["backend"],
            registry=r,
        )
        self.batches = Gauge("gateway_batches", "Batches (Batch API) by status.", ["status"], registry=r)
        self.batch_lines = Counter(
            "gateway_batch_lines",
            "Batch lines answered, by outcome (completed: 2xx; failed: any other answer, or none).",
            ["outcome"],
            registry=r,
        )
        self.batch_lines_pending = Gauge(
            "gateway_batch_lines_pending", "Lines of unfinished batches not answered yet.", registry=r
        )
        self.batch_tokens = Counter(
            "gateway_batch_tokens",
            "Tokens of answered batch lines, by kind (prompt, completion); rate() is batch tokens/s.",
            ["kind"],
            registry=r,
        )
        self._mirrored: dict[tuple[str, str], float] = {}

    def mirror(self, counter: Counter, label: str, total: float) -> None:
        """Bring `counter{label}` up to `total`, a count kept elsewhere (set when scraped)."""
        key = (counter._name, label)
        delta = total - self._mirrored.get(key, 0.0)
        if delta > 0:
            counter.labels(label).inc(delta)
            self._mirrored[key] = total

    def set_sla(self, sla: SLA) -> None:
        self.sla_target.clear()
        for signal, target in sla.targets().items():
            self.sla_target.labels(signal).set(target)

    def forget_backend(self, name: str) -> None:
        """Drop the gauges of a backend that left the config (a reload); counters keep their history."""
        gauges = (
            self.inflight,
            self.limit,
            self.ceiling,
            self.floor,
            self.backend_up,
            self.kv_usage,
            self.waiting,
        )
        for gauge in gauges:
            with contextlib.suppress(KeyError):
                gauge.remove(name)
        for signal in ("ttft", "tpot", "e2e"):
            with contextlib.suppress(KeyError):
                self.latency_p90.remove(name, signal)

    def render(self) -> bytes:
        return generate_latest(self.registry)
