"""Metrics counted as requests happen: answers, sheds, queue waits, client-seen latency, loop lag.

These are events, so they are counters and histograms updated on the request path, by the event loop
alone (gateway.metrics.series; gateway.metrics.telemetry caches their label series); nothing here is
read from live state at scrape.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gateway.metrics.series import LoopCounter, LoopHistogram

LATENCY_BUCKETS = (
    *(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75),
    *(1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0),
)
"""LLM request latency: tens of milliseconds up to several minutes."""
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
"""Queue waits: a millisecond (admitted at once) up to the longest queue timeout worth setting."""
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Event-loop lag: a healthy loop is under a few milliseconds; seconds mean every request waits."""


class RequestMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.answered = LoopCounter(
            "gateway_requests",
            "Requests answered, by model, backend and HTTP status.",
            ["model", "backend", "status"],
            registry=r,
        )
        self.rejected = LoopCounter(
            "gateway_rejected_requests",
            "Requests shed by the gateway, by model and reason.",
            ["model", "reason"],
            registry=r,
        )
        self.queue_wait = LoopHistogram(
            "gateway_queue_wait_seconds",
            "Time requests spent in the admission queue.",
            ["model"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.ttft = LoopHistogram(
            "gateway_time_to_first_token_seconds",
            "Time to first token as the client saw it, queueing included (streaming requests).",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.duration = LoopHistogram(
            "gateway_request_duration_seconds",
            "Request duration as the client saw it.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.loop_lag = LoopHistogram(
            "gateway_event_loop_lag_seconds",
            "How late the event loop ran a timer: time every request waits before it is looked at.",
            buckets=LAG_BUCKETS,
            registry=r,
        )
