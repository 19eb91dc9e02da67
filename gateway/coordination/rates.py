"""The rate of a counter read now and then: how fast requests finish across every replica. Pure.

A backend's requests finish in every replica; this is the growth of the backend's shared count of
finished requests (shared.py) per second, what `/admin/state` shows as the backend's drain across
replicas. A queue's Retry-After does not use it: a process's waiters are served by the leases its
pump gets, freed in whichever replica, and the queue measures exactly that (its own dispatches while
backlogged, gateway.admission.drain); the backend's whole rate would promise each replica's queue
the slots the others' queues take. Readings arrive at irregular times, so the estimate is an EWMA
in continuous time:

    r <- r + (1 - exp(-dt / tau)) * (delta / dt - r)

(each reading weighs by how much time it covers; tau seconds of history). A counter that went
down was recreated (Redis restarted empty): the new value is all that happened since.
"""

from __future__ import annotations

import math


class CounterRate:
    def __init__(self, *, tau: float = 10.0) -> None:
        if not tau > 0:
            raise ValueError(f"tau must be > 0, got {tau!r}")
        self.tau = tau
        self._last: tuple[float, float] | None = None
        self._rate: float | None = None

    def observe(self, now: float, total: float) -> None:
        last = self._last
        self._last = (now, total)
        if last is None:
            return
        dt = now - last[0]
        if dt <= 0:  # same instant: let the next reading carry this one's events
            self._last = last
            return
        delta = total - last[1] if total >= last[1] else total
        instant = delta / dt
        prev = self._rate
        self._rate = instant if prev is None else prev + -math.expm1(-dt / self.tau) * (instant - prev)

    def rate(self) -> float | None:
        """Events per second; None until two readings some time apart were seen."""
        return self._rate
