"""Deltas of an engine's cumulative counter (vllm:num_preemptions_total) between control ticks.

    pending += total - seen      if total >= seen
    pending += total             if total < seen (the engine restarted and counts from zero)

Rules:
- The first reading is a baseline, not a delta: the gateway did not see what came before it.
- A scrape without the counter leaves the baseline as it was, so a missed scrape loses nothing.
- `take` hands the deltas since the previous take to one tick and starts again from zero.
"""

from __future__ import annotations


class CounterDelta:
    """How much a monotonic counter rose since the previous `take`, across engine restarts."""

    __slots__ = ("_pending", "_seen")

    def __init__(self) -> None:
        self._seen: float | None = None
        self._pending = 0.0

    def observe(self, total: float | None) -> None:
        """One scrape's reading of the counter; None when the scrape did not have it."""
        if total is None:
            return
        seen = self._seen
        if seen is not None:
            self._pending += total - seen if total >= seen else total
        self._seen = total

    def take(self) -> float:
        """The rise since the previous take; the next one starts from zero."""
        pending = self._pending
        self._pending = 0.0
        return pending
