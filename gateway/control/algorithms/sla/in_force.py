"""Since when the current limit has been in force: at once for a raise, and for a cut only once the
requests admitted above it have finished.

Per tick, with the epoch's start e = now - since_change (the limit last changed, or it filled after
a quiet spell) and the tick's peak in flight P:

    a new epoch, P <= limit:           in force since e
    the epoch's later ticks, P <= limit, not yet in force:   in force since now - interval
    P > limit:                         not in force yet (0 seconds)

Why: after a cut from 10 to 5 the ten requests in flight run on, with nothing new dispatched, until
five have finished; on long answers that is several seconds. A rate or P90 read meanwhile and
taken as the lower limit's is the higher one's, and read as 5 being as slow as 10 it proves a
latency floor that is not there. A raise takes effect at once: it holds nothing back that ran.
The first tick of an epoch seen with P <= limit counts from the epoch's start, since no tick saw
more in flight than the limit since then.
Pure: the caller passes each observation, with its time.
"""

from __future__ import annotations

import math

from gateway.types import Observation


class InForce:
    def __init__(self) -> None:
        self._epoch = math.nan  # the start of the epoch last seen
        self._since: float | None = None  # when the limit took effect in that epoch
        self.new_epoch = False
        """Whether the last observation began an epoch (the limit changed, or filled after a quiet
        spell)."""

    def seconds(self, obs: Observation) -> float:
        """How long the limit of this observation has been in force, counting this tick."""
        start = obs.now - obs.since_change
        self.new_epoch = not math.isclose(start, self._epoch, rel_tol=0.0, abs_tol=1e-6)
        if self.new_epoch:
            self._epoch, self._since = start, None
        if self._since is None and obs.peak_inflight <= obs.limit:
            self._since = start if self.new_epoch else max(start, obs.now - obs.interval)
        return 0.0 if self._since is None else obs.now - self._since
