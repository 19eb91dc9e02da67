"""Routing strategies: which backend with room takes a request, and, at late binding, which request.

A strategy is given the backends serving the model (`Load`: in flight, limit, whether it may take
this request now, KV usage and capacity, cache epoch) and one or more requests (`RouteKey`), and
returns a `Choice`, or None when no backend may take any of them. It is told where each request
went (`routed`), which is how the prefix strategy learns what each backend caches.

- `round_robin`: the next backend with room, in turn; the first request offered.
- `least_loaded`: the backend with the largest free share of its limit (a slow backend, with a
  lower limit, gets proportionally less); the first request offered.
- `prefix` (default): expected cached prefix weighed against load, under a bound on imbalance
  (gateway.routing.prefix, gateway.routing.scorer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gateway.routing.key import RouteKey
from gateway.routing.prefix import PrefixAffinity
from gateway.routing.scorer import Choice, IndexReport, Load

STRATEGIES = ("prefix", "least_loaded", "round_robin")


class Strategy(Protocol):
    name: str

    def choose(self, model: str, routes: Sequence[RouteKey | None], loads: Sequence[Load]) -> Choice | None:
        """The request and backend to pair now; None if no backend may take any request."""

    def routed(self, model: str, route: RouteKey | None, load: Load, choice: Choice) -> None:
        """The chosen request was sent to the chosen backend."""

    def report(self, backend: str, epoch: int) -> IndexReport | None:
        """The prefix index's view of the backend; None for a strategy without one."""

    def forget(self, backend: str) -> None:
        """The backend left the pool: drop what is known about it."""


class _LoadOnly:
    """A strategy that looks only at load: it learns nothing from where requests went."""

    def routed(self, model: str, route: RouteKey | None, load: Load, choice: Choice) -> None:
        pass

    def report(self, backend: str, epoch: int) -> IndexReport | None:
        return None

    def forget(self, backend: str) -> None:
        pass


class RoundRobin(_LoadOnly):
    name = "round_robin"

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def choose(self, model: str, routes: Sequence[RouteKey | None], loads: Sequence[Load]) -> Choice | None:
        n = len(loads)
        start = self._next.get(model, 0)
        for step in range(n):
            i = (start + step) % n
            if loads[i].open:
                self._next[model] = i + 1
                return Choice(0, i)
        return None


class LeastLoaded(_LoadOnly):
    name = "least_loaded"

    def choose(self, model: str, routes: Sequence[RouteKey | None], loads: Sequence[Load]) -> Choice | None:
        top: int | None = None
        top_free = 0.0
        for i, load in enumerate(loads):
            if load.open and load.free > top_free:
                top, top_free = i, load.free
        return None if top is None else Choice(0, top)


def create(name: str, imbalance: float = 0.2) -> Strategy:
    if name == "prefix":
        return PrefixAffinity(imbalance)
    if name == "least_loaded":
        return LeastLoaded()
    if name == "round_robin":
        return RoundRobin()
    raise ValueError(f"unknown routing strategy {name!r}; known: {', '.join(STRATEGIES)}")
