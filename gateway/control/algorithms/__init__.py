"""Limit algorithms, selectable by name: `create("sla", params, sla)`.

Each algorithm lives in its own pure module and opens with its math and its source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from gateway.control.algorithms.aimd import AIMDLimit
from gateway.control.algorithms.base import LimitAlgorithm, clamp
from gateway.control.algorithms.fixed import FixedLimit
from gateway.control.algorithms.goodput.controller import GoodputLimit
from gateway.control.algorithms.gradient import GradientLimit
from gateway.control.algorithms.sla.controller import SLALimit
from gateway.types import SLA

NAMES: tuple[str, ...] = ("sla", "goodput", "aimd", "gradient", "fixed")
DEFAULT = "sla"

REASONS: tuple[str, ...] = (
    "above_ceiling",
    "at_ceiling",
    "fixed",
    "gradient",
    "headroom",
    "insufficient_samples",
    "measuring_min_rtt",
    "min_rtt_measured",
    "no_gain",
    "not_binding",
    "p90_over_target",
    "preemptions",
    "probe",
    "probing",
    "sla_infeasible",
    "steady",
    "throughput_falls",
)
"""Every `Decision.reason` an algorithm here can give: a closed set, fit for a metric label."""

_FACTORIES: Mapping[str, Callable[[Mapping[str, object], SLA], LimitAlgorithm]] = MappingProxyType(
    {
        "sla": SLALimit.from_params,
        "goodput": GoodputLimit.from_params,
        "aimd": AIMDLimit.from_params,
        "gradient": GradientLimit.from_params,
        "fixed": FixedLimit.from_params,
    }
)


def create(name: str, params: Mapping[str, object], sla: SLA) -> LimitAlgorithm:
    """Build the algorithm `name`, validating `params`; ValueError names the bad key."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(f"unknown limit algorithm {name!r}; choose one of {', '.join(NAMES)}")
    return factory(params, sla)


__all__ = [
    "DEFAULT",
    "NAMES",
    "REASONS",
    "AIMDLimit",
    "FixedLimit",
    "GoodputLimit",
    "GradientLimit",
    "LimitAlgorithm",
    "SLALimit",
    "clamp",
    "create",
]
