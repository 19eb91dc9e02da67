"""The `sla`, `controller` and `queue` sections: what latency to hold, how the limit is found, how
long requests may wait for it.

Without an `sla` section the target is a P90 TTFT of one second (DEFAULT_SLA), so a bare config
still adapts; an `sla` section that names no target means none. The algorithm and its params are
checked by building the algorithm once (gateway.control.algorithms), so a typo fails at load, not at the first
tick.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.reader import ConfigReader, default
from gateway.types import SLA

DEFAULT_SLA = SLA(ttft_p90=1.0)
"""The target when the config has no `sla` section."""


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    algorithm: str = "sla"
    params: Mapping[str, object] = field(default_factory=dict)
    interval: float = 1.0
    window_seconds: float = 30.0
    min_samples: int = 20


@dataclass(frozen=True, slots=True)
class QueueConfig:
    max_depth: int = 1024
    timeout: float = 30.0


def parse_sla(r: ConfigReader, data: Mapping[str, Any]) -> SLA:
    raw = r.section(data, "sla", "")
    r.unknown(raw, {"ttft_p90", "tpot_p90", "e2e_p90", "models", "queue_share"}, "sla.")
    sla = SLA(*(r.optional_seconds(raw, k, "sla.") for k in ("ttft_p90", "tpot_p90", "e2e_p90")))
    return DEFAULT_SLA if not sla.targets() and "sla" not in data else sla


def parse_controller(r: ConfigReader, data: Mapping[str, Any]) -> ControllerConfig:
    c = r.section(data, "controller", "")
    path = "controller."
    r.unknown(c, {"algorithm", "params", "interval", "window_seconds", "min_samples"}, path)
    params = c.get("params", {})
    if not isinstance(params, Mapping):
        r.problems.append("controller.params: must be a mapping")
        params = {}
    return ControllerConfig(
        algorithm=str(c.get("algorithm", default(ControllerConfig, "algorithm"))),
        params=dict(params),
        interval=r.seconds(c, "interval", default(ControllerConfig, "interval"), path),
        window_seconds=r.seconds(c, "window_seconds", default(ControllerConfig, "window_seconds"), path),
        min_samples=r.number(
            c,
            "min_samples",
            default(ControllerConfig, "min_samples"),
            path,
            minimum=1,
            maximum=1e6,
            integer=True,
        ),
    )


def parse_queue(r: ConfigReader, data: Mapping[str, Any]) -> QueueConfig:
    q = r.section(data, "queue", "")
    r.unknown(q, {"max_depth", "timeout"}, "queue.")
    return QueueConfig(
        max_depth=r.number(
            q, "max_depth", default(QueueConfig, "max_depth"), "queue.", maximum=1e6, integer=True
        ),
        timeout=r.seconds(q, "timeout", default(QueueConfig, "timeout"), "queue."),
    )


def check_algorithm(r: ConfigReader, controller: ControllerConfig, sla: SLA) -> None:
    from gateway.control import algorithms

    try:
        algorithms.create(controller.algorithm, controller.params, sla)
    except ValueError as exc:
        r.problems.append(f"controller: {exc}")
