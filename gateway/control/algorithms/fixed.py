"""Fixed limit: the baseline every adaptive algorithm is measured against.

Math: limit(t) = L for all t, clamped to [floor, max_limit].

It ignores latency and the KV-derived ceiling on purpose (`respects_kv_ceiling = False`), so a
sweep of fixed limits shows what each concurrency really does to the backend.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.control.algorithms.base import Params, clamp, decide
from gateway.types import SLA, Decision, Observation


class FixedLimit:
    name = "fixed"
    respects_kv_ceiling = False

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"algorithm 'fixed': parameter 'limit' must be >= 1, got {limit}")
        self.limit = limit

    @classmethod
    def from_params(cls, params: Mapping[str, object], sla: SLA) -> FixedLimit:
        p = Params(cls.name, params)
        limit = p.integer("limit", None, low=1)
        p.finish()
        return cls(limit)

    def initial_limit(self, floor: int, ceiling: int) -> int:
        return clamp(self.limit, floor, ceiling)

    def update(self, obs: Observation) -> Decision:
        return decide(obs, self.limit, "fixed", f"fixed limit {self.limit}")
