"""The queue's drain rate: dispatches per second while requests wait.

While the queue is non-empty every backend serving the model is at its limit, so the rate at which
waiters are dispatched is the rate at which slots free up: the service rate the queue can count on.
Outside those periods dispatches only mirror arrivals, so time is counted on a "backlog clock" that
runs only while something waits.

On that clock the estimate is an exponentially weighted event rate with time constant tau (the
continuous form of an EWMA, as in the Unix load average):

    s(t) = sum_i exp(-(t - t_i) / tau)          over dispatch times t_i
    rate = s / (tau * (1 - exp(-B / tau)))      B = backlog time observed so far

A steady rate r gives s -> r * tau. The denominator is the weight the window has actually had, so
the first seconds are not biased towards zero (the same correction as Adam's bias correction,
Kingma and Ba 2015). Bursts of dispatches at one instant simply add to s.
"""

from __future__ import annotations

import math


class DrainRate:
    def __init__(self, *, tau: float = 10.0, min_backlog: float = 1.0, now: float = 0.0):
        if not tau > 0:
            raise ValueError(f"tau must be > 0, got {tau!r}")
        if min_backlog < 0:
            raise ValueError(f"min_backlog must be >= 0, got {min_backlog!r}")
        self.tau = tau
        self.min_backlog = min_backlog
        """Backlog seconds to observe before the rate counts as measured."""
        self._sum = 0.0
        self._backlog = 0.0
        self._last = now
        self._backlogged = False
        self.events = 0

    def _advance(self, now: float) -> None:
        dt = now - self._last
        if dt > 0 and self._backlogged:
            self._sum *= math.exp(-dt / self.tau)
            self._backlog += dt
        self._last = max(self._last, now)

    def set_backlogged(self, now: float, backlogged: bool) -> None:
        self._advance(now)
        self._backlogged = backlogged

    def record(self, now: float, n: int = 1) -> None:
        self._advance(now)
        self._sum += n
        self.events += n

    def rate(self, now: float) -> float | None:
        """Dispatches per second while backlogged.

        None until something was dispatched from the queue and min_backlog seconds were observed:
        a long first service must not read as a stalled queue.
        """
        s, backlog = self._sum, self._backlog
        dt = now - self._last
        if dt > 0 and self._backlogged:
            s *= math.exp(-dt / self.tau)
            backlog += dt
        if not self.events or backlog < self.min_backlog or backlog <= 0:
            return None  # nothing has drained yet: no basis for an estimate
        return s / (self.tau * -math.expm1(-backlog / self.tau))
