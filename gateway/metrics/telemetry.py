"""Hot-path accounting: per-request counters and histograms, with their label series cached.

A request touches three or four series, so each is looked up once per label set and kept. Every
label value is one the gateway knows (a configured backend, a model some backend serves, a reason,
a status), never a client's string: each value is a series kept for the life of the process.
"""

from __future__ import annotations

from gateway.metrics import Metrics
from gateway.metrics.series import CounterSeries, HistogramSeries

UNKNOWN_MODEL = "unknown"
"""The `model` label of requests for a model no backend is known to serve: the name is the client's,
and a label value per name would let clients grow /metrics without bound."""


class Telemetry:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._requests: dict[tuple[str, str, int], CounterSeries] = {}
        self._duration: dict[str, HistogramSeries] = {}
        self._ttft: dict[str, HistogramSeries] = {}
        self._wait: dict[str, HistogramSeries] = {}
        self._rejected: dict[tuple[str, str], CounterSeries] = {}

    def rejected(self, model: str, reason: str) -> None:
        key = (model, reason)
        child = self._rejected.get(key)
        if child is None:
            child = self._rejected[key] = self.metrics.requests.rejected.labels(model, reason)
        child.inc()

    def queued(self, model: str, wait: float) -> None:
        child = self._wait.get(model)
        if child is None:
            child = self._wait[model] = self.metrics.requests.queue_wait.labels(model)
        child.observe(wait)

    def finished(
        self,
        model: str,
        backend: str,
        status: int,
        arrived: float,
        now: float,
        first_token_at: float | None,
        *,
        client_facing: bool = True,
    ) -> None:
        """Count the request; its duration and TTFT only when a client waited for it (not for a
        batch line, whose wait is the batch's)."""
        key = (model, backend, status)
        child = self._requests.get(key)
        if child is None:
            child = self._requests[key] = self.metrics.requests.answered.labels(model, backend, str(status))
        child.inc()
        if not client_facing:
            return
        duration = self._duration.get(model)
        if duration is None:
            duration = self._duration[model] = self.metrics.requests.duration.labels(model)
        duration.observe(now - arrived)
        if first_token_at is not None:
            ttft = self._ttft.get(model)
            if ttft is None:
                ttft = self._ttft[model] = self.metrics.requests.ttft.labels(model)
            ttft.observe(first_token_at - arrived)
