"""The queue's drain rate: dispatches per second while requests wait, and how far it can be trusted.

While the queue is non-empty every backend serving the model is at its limit, so the rate at which
waiters are dispatched is the rate at which slots free up: the service rate the queue can count on.
Outside those periods dispatches only mirror arrivals, so time is counted on a "backlog clock" that
runs only while something waits.

On that clock an estimate is an exponentially weighted event rate with time constant tau (the
continuous form of an EWMA, as in the Unix load average):

    s(t) = sum_i exp(-(t - t_i) / tau)          over dispatch times t_i
    w(t) = 1 - exp(-B / tau)                    B = backlog time observed so far
    rate = s / (tau * w)

A steady rate r gives s -> r * tau. w is the weight the window has actually had, so the first
seconds are not biased towards zero (the same correction as Adam's bias correction, Kingma and Ba
2015). Bursts of dispatches at one instant simply add to s. The rate counts as measured once
`min_backlog` seconds of backlog or `min_events` dispatches stand behind it.

Two such estimates run side by side, a slow one (tau, 10 s) and a fast one (fast_tau, 1 s), and the
rate is the larger of the two, the fast one counting only while it stands on `fast_events`
dispatches (fewer make it noise). The fast one follows a rise within seconds: a cold gateway
doubles its limits every tick, and taking in a large burst slows its own dispatching for seconds,
after which the backends drain several times what the slow average of those seconds says. The slow
one keeps a short stall (one late response) from reading as an outage.

Evidence ages. After `forget_after` seconds without a backlog the estimate is dropped and measured
anew: the backends may have recovered, restarted or been replaced while nothing waited, and a rate
measured during an outage must not refuse the next burst.

Acting on the estimate is a forecast over a request's deadline, so it needs evidence over a
comparable span: `firm()` holds once `firm_backlog` seconds of backlog (tau by default) stand
behind it. Before that the rate is reported but not acted on. While a cold gateway takes in a burst
of thousands of connections its dispatching is a tenth of what it is a few seconds later, and
refusing the queue's tail on that reading turned most of a burst away.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class _Decaying:
    """One bias-corrected exponentially weighted event rate on the backlog clock."""

    tau: float
    s: float = 0.0
    w: float = 0.0

    def decayed(self, dt: float) -> tuple[float, float]:
        d = math.exp(-dt / self.tau)
        return self.s * d, self.w * d + (1.0 - d)

    def advance(self, dt: float) -> None:
        self.s, self.w = self.decayed(dt)

    def rate(self, s: float, w: float) -> float:
        return s / (self.tau * w) if w > 0 else 0.0


class DrainRate:
    def __init__(
        self,
        *,
        tau: float = 10.0,
        fast_tau: float = 1.0,
        fast_events: float = 20.0,
        min_backlog: float = 1.0,
        min_events: int = 16,
        firm_backlog: float | None = None,
        forget_after: float | None = None,
        now: float = 0.0,
    ):
        if not 0 < fast_tau <= tau < math.inf:
            raise ValueError(f"need 0 < fast_tau <= tau < inf, got fast_tau={fast_tau!r}, tau={tau!r}")
        firm_backlog = tau if firm_backlog is None else firm_backlog
        forget_after = tau if forget_after is None else forget_after
        if not fast_events >= 0:
            raise ValueError(f"fast_events must be >= 0 (inf: no fast estimate), got {fast_events!r}")
        for name, value in (("min_backlog", min_backlog), ("firm_backlog", firm_backlog)):
            if not 0 <= value < math.inf:
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        if not forget_after > 0:
            raise ValueError(f"forget_after must be > 0, got {forget_after!r}")
        self.tau = tau
        self.fast_events = fast_events
        self.min_backlog = min_backlog
        """Backlog seconds to observe before the rate counts as measured..."""
        self.min_events = min_events
        """...or dispatches: a small queue of a fast backend drains before a second has passed."""
        self.firm_backlog = max(firm_backlog, min_backlog)
        self.forget_after = forget_after
        self._slow = _Decaying(tau)
        self._fast = _Decaying(fast_tau)
        self._backlog = 0.0
        self._last = now
        self._backlogged = False
        self._idle_since = now
        self.events = 0

    def _advance(self, now: float) -> None:
        dt = now - self._last
        if dt > 0 and self._backlogged:
            self._slow.advance(dt)
            self._fast.advance(dt)
            self._backlog += dt
        self._last = max(self._last, now)

    def _stale(self, now: float) -> bool:
        return not self._backlogged and now - self._idle_since >= self.forget_after

    def _forget(self) -> None:
        self._slow = _Decaying(self._slow.tau)
        self._fast = _Decaying(self._fast.tau)
        self._backlog = 0.0
        self.events = 0

    def set_backlogged(self, now: float, backlogged: bool) -> None:
        self._advance(now)
        if backlogged == self._backlogged:
            return
        if backlogged and self._stale(now):
            self._forget()
        self._backlogged = backlogged
        if not backlogged:
            self._idle_since = now

    def record(self, now: float, n: int = 1) -> None:
        self._advance(now)
        if self._stale(now):
            self._forget()
        self._slow.s += n
        self._fast.s += n
        self.events += n

    def backlog(self, now: float) -> float:
        """Backlog seconds behind the current estimate."""
        dt = now - self._last
        return self._backlog + (dt if dt > 0 and self._backlogged else 0.0)

    def rate(self, now: float) -> float | None:
        """Dispatches per second while backlogged.

        None until something was dispatched from the queue and min_backlog seconds or min_events
        dispatches were observed (a long first service must not read as a stalled queue), and once
        the evidence is stale.
        """
        if not self.events or self._stale(now):
            return None
        backlog = self.backlog(now)
        if backlog <= 0 or (backlog < self.min_backlog and self.events < self.min_events):
            return None  # too little has drained yet: no basis for an estimate
        dt = max(0.0, now - self._last) if self._backlogged else 0.0
        slow = self._slow.rate(*self._slow.decayed(dt))
        fs, fw = self._fast.decayed(dt)
        fast = self._fast.rate(fs, fw) if fs >= self.fast_events else 0.0
        return max(slow, fast)

    def until_measured(self, now: float) -> float:
        """Seconds of backlog still needed before a rate can be given (0 once it is, or while
        nothing waits)."""
        if not self._backlogged or self.rate(now) is not None:
            return 0.0
        return max(0.0, self.min_backlog - self.backlog(now))

    def firm(self, now: float) -> bool:
        """Whether enough backlog stands behind the rate to refuse work on it."""
        return self.rate(now) is not None and self.backlog(now) >= self.firm_backlog
