"""Hot-path accounting: the counters and histograms each request moves.

A series is looked up by its label values (gateway.metrics.series keeps one per label set). Every
label value is one the gateway knows (a configured backend, a model some backend serves, a reason,
a status), never a client's string: each value is a series kept for the life of the process.
"""

from __future__ import annotations

from gateway.metrics import Metrics

UNKNOWN_MODEL = "unknown"
"""The `model` label of requests for a model no backend is known to serve: the name is the client's,
and a label value per name would let clients grow /metrics without bound."""


class Telemetry:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def rejected(self, model: str, reason: str) -> None:
        self.metrics.requests.rejected.labels(model, reason).inc()

    def queued(self, model: str, wait: float) -> None:
        self.metrics.requests.queue_wait.labels(model).observe(wait)

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
        requests = self.metrics.requests
        requests.answered.labels(model, backend, str(status)).inc()
        if not client_facing:
            return
        requests.duration.labels(model).observe(now - arrived)
        if first_token_at is not None:
            requests.ttft.labels(model).observe(first_token_at - arrived)
