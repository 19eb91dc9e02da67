"""Metrics counted as the controller and the Batch API act: limit changes, batch lines and tokens.

Events again (counters bumped where they happen); their state-shaped siblings, the limit itself and
the batches by status, are read at scrape time by gateway.metrics.live.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gateway.metrics.series import LoopCounter


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.adjustments = LoopCounter(
            "gateway_controller_adjustments",
            "Limit changes made by the controller.",
            ["backend", "direction", "reason"],
            registry=registry,
        )


class BatchMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.lines = LoopCounter(
            "gateway_batch_lines",
            "Batch lines answered, by outcome (completed: 2xx; failed: any other answer, or none).",
            ["outcome"],
            registry=registry,
        )
        self.tokens = LoopCounter(
            "gateway_batch_tokens",
            "Tokens of answered batch lines, by kind (prompt, completion); rate() is batch tokens/s.",
            ["kind"],
            registry=registry,
        )
