"""The `routing` section: which strategy picks the backend for a request (gateway.routing)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config.reader import ConfigReader, default


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    strategy: str = "prefix"
    """prefix | least_loaded | round_robin (gateway.routing)."""
    max_imbalance: float = 0.2
    """No backend takes a request that would put it above (1 + this) x the mean load while
    another has room (prefix strategy)."""
    lookahead: int = 16
    """When a slot frees, how many of the waiters allowed to go next compete for it (1: first
    come, first served); each waiter is passed over at most this many times."""


def parse_routing(r: ConfigReader, data: Mapping[str, Any]) -> RoutingConfig:
    from gateway.routing import STRATEGIES

    raw = r.section(data, "routing", "")
    r.unknown(raw, {"strategy", "max_imbalance", "lookahead"}, "routing.")
    strategy = raw.get("strategy", default(RoutingConfig, "strategy"))
    if strategy not in STRATEGIES:
        r.problems.append(f"routing.strategy: must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        strategy = default(RoutingConfig, "strategy")
    return RoutingConfig(
        strategy=strategy,
        max_imbalance=float(
            r.number(raw, "max_imbalance", default(RoutingConfig, "max_imbalance"), "routing.", maximum=1e6)
        ),
        lookahead=r.number(
            raw,
            "lookahead",
            default(RoutingConfig, "lookahead"),
            "routing.",
            minimum=1,
            maximum=1e6,
            integer=True,
        ),
    )
