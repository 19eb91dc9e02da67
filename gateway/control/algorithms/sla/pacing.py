"""When the `sla` controller may probe upward again: the wait after a probe that was undone.

With n probes undone in a row (a cut back, or lower throughput), the next may come

    probe_every x 2^(n - 1) seconds after the last was undone, at most `max_probe_wait`

and once a higher limit was measured to deliver less, not before `probe_every` from then.

Why: a failure repeated at once costs what it cost again, and doubling the wait makes a limit that
keeps failing probe ever less often; the wait stops at half the ledger's memory so that the last
failure is still known when the next probe comes. A probe that held, or a backend that changed
(what failed was measured against other conditions), starts the count again.
Pure: the caller passes the time.
"""

from __future__ import annotations

import math


class ProbePacing:
    def __init__(self, every: float, longest: float) -> None:
        self._every, self._longest = every, longest
        self._failures = 0  # probes undone in a row
        self._next_at = -math.inf

    def due(self, now: float) -> bool:
        """Whether a probe may start at `now`."""
        return now >= self._next_at

    def failed(self, now: float) -> None:
        """A probe was undone at `now`: wait every x 2^(failures - 1), at most `longest`."""
        self._failures += 1
        self._next_at = now + min(self._every * 2.0 ** (self._failures - 1), self._longest)

    def held(self) -> None:
        """A probe held, or the backend changed: the next failure waits `every` again."""
        self._failures = 0

    def wait_from(self, now: float) -> None:
        """A higher limit delivered less: no probe for `every` from `now`."""
        self._next_at = now + self._every
