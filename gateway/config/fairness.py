"""The `fairness` section: what a tenant's share of a model's queue is counted in.

`cost: tokens` (the default) counts service as the Virtual Token Counter does, prompt tokens at
`prompt_weight` and output tokens at `output_weight` each (gateway.admission.fairness); `cost:
requests` counts every request as one, whatever its size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config.reader import ConfigReader, default

COSTS = ("tokens", "requests")


@dataclass(frozen=True, slots=True)
class FairnessConfig:
    cost: str = "tokens"
    prompt_weight: float = 1.0
    output_weight: float = 2.0


def parse_fairness(r: ConfigReader, data: Mapping[str, Any]) -> FairnessConfig:
    raw = r.section(data, "fairness", "")
    path = "fairness."
    r.unknown(raw, {"cost", "prompt_weight", "output_weight"}, path)
    cost = raw.get("cost", default(FairnessConfig, "cost"))
    if cost not in COSTS:
        r.problems.append(f"{path}cost: must be one of {', '.join(COSTS)}, got {cost!r}")
        cost = default(FairnessConfig, "cost")
    weights = {
        key: float(r.number(raw, key, default(FairnessConfig, key), path, maximum=1e6))
        for key in ("prompt_weight", "output_weight")
    }
    if weights["prompt_weight"] + weights["output_weight"] <= 0:
        r.problems.append(f"{path}prompt_weight, output_weight: must not both be 0")
        weights = {"prompt_weight": 1.0, "output_weight": 2.0}
    return FairnessConfig(cost=cost, **weights)
