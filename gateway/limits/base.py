"""The contract every limit algorithm keeps: given an observation, return a decision.

Algorithms are pure: no I/O, no clock reads, no asyncio. They may keep small state between calls
(a smoothed estimate, the last direction) but everything they know about time comes from
`Observation.now`.
"""

from __future__ import annotations

from typing import Protocol

from gateway.types import Decision, Observation


class LimitAlgorithm(Protocol):
    name: str

    def initial_limit(self, floor: int, ceiling: int) -> int:
        """The limit to start with before any sample has been seen."""
        ...

    def update(self, obs: Observation) -> Decision:
        """The new limit, clamped to [obs.floor, obs.ceiling], and why."""
        ...


def clamp(value: float, floor: int, ceiling: int) -> int:
    return max(floor, min(ceiling, int(value)))
