"""The ceiling an engine sets by refusing work: vLLM's `--max-num-queued-reqs` (0.32).

Such an engine answers 503 "currently busy" to a request past its cap on the requests it holds
(running plus waiting). When it refuses one of n requests the gateway has in flight there, the
other n - 1 are what it takes: that is a ceiling on the limit, lowered at once, the lowest of the
refusals of the last `memory` seconds. It lifts `memory` seconds after the last refusal: traffic
that reaches the engine past the gateway, or long prompts (the token cap), may have been what
filled it, and the limit then climbs back on the controller's own evidence.
"""

from __future__ import annotations


class BusyCeiling:
    def __init__(self, memory: float) -> None:
        if not memory > 0:
            raise ValueError(f"memory must be > 0, got {memory!r}")
        self.memory = memory
        self._cap: tuple[int, float] | None = None
        """The most requests the engine took at its last refusal, and when."""

    def refused(self, inflight: int, floor: int, now: float) -> None:
        """The engine refused one of `inflight` requests as busy."""
        taken = max(floor, inflight - 1)
        current = self.bound(now)
        self._cap = (taken if current is None else min(taken, current), now)

    def bound(self, now: float) -> int | None:
        """The ceiling while a refusal is recent; None otherwise."""
        cap = self._cap
        if cap is None or now - cap[1] >= self.memory:
            return None
        return cap[0]
