"""Choosing the backend for a request: prefix-cache affinity, load, sessions. Pure: no I/O, no clock."""

from gateway.routing.key import RouteKey
from gateway.routing.scorer import Choice, IndexReport, Load
from gateway.routing.strategies import STRATEGIES, Strategy, create

__all__ = ["STRATEGIES", "Choice", "IndexReport", "Load", "RouteKey", "Strategy", "create"]
