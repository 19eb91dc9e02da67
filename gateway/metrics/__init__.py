"""The gateway's Prometheus metrics: the only package that imports prometheus_client.

One registry per gateway instance (never the process-global default), so tests and several gateways
in one process do not collide. Events are counted where they happen (`requests`, `controller`,
`batch`; gateway.metrics.telemetry caches the hot-path label children); everything that is state rather
than an event is read from the running gateway at scrape time (`live`, gateway.metrics.live).
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway.metrics.client_sla import ClientSLA
from gateway.metrics.events import BatchMetrics, ControllerMetrics
from gateway.metrics.live import LiveGauges
from gateway.metrics.requests import RequestMetrics
from gateway.metrics.tenants import TenantMetrics
from gateway.types import Clock

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self, *, coordination: bool = False, clock: Clock = time.monotonic) -> None:
        """`coordination`: export the shared-state gauges (see gateway.metrics.live)."""
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = RequestMetrics(self.registry)
        self.controller = ControllerMetrics(self.registry)
        self.batch = BatchMetrics(self.registry)
        self.tenants = TenantMetrics(self.registry)
        self.live = LiveGauges(coordination=coordination)
        self.registry.register(self.live)
        self.client_sla = ClientSLA(clock)
        self.registry.register(self.client_sla)

    def render(self) -> bytes:
        return generate_latest(self.registry)
