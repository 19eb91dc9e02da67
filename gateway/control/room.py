"""When the requests that fill a limit are a burst, and the room a burst after a quiet spell gets.

    quiet      = the last tick that saw the limit idle is at least `QUIET` seconds after the last
                 tick that saw it bind (true from the start, before any tick bound)
    burst      = a tick sees the limit bind while quiet
    in force   = the limit, or while quiet at least min(W, ceiling), W the requests the KV cache
                 holds with every request whole (gateway.control.ceiling `burst_ceiling`)

Why: requests that start together prefill together, so what a burst measures describes the burst
and not the limit; the limiter starts a burst epoch whose values count toward a raise only
(gateway.control.bounds). On the real engine the first batch of a fresh gateway read 1.2-3.3x the
TPOT target, and the controller cut within its first five seconds in 11 of 12 runs. Only ticks
that saw the limit idle make a quiet spell: a tick that comes late (a busy host) saw nothing in
between, and taking the gap for a quiet spell threw the evidence away every 10-12 s. While quiet, a
burst is taken in at once where the engine has room for it, so none preempts another: a limit
fallen back while it idled queues in the gateway what the engine would batch at once. The tick that
sees the limit bind ends the room.
"""

from __future__ import annotations

import math

QUIET = 2.0
"""Seconds without the limit binding after which the requests that fill it again are a burst."""


class BurstRoom:
    """One backend's quiet spells, as the control ticks saw its limit bind or idle."""

    def __init__(self, at: float) -> None:
        self._binding_at = -math.inf
        """The last tick at which the limit held traffic back."""
        self._idle_at = at
        """The last tick at which it did not."""

    def quiet(self) -> bool:
        """Whether the limit has held nothing back for `QUIET` seconds."""
        return self._idle_at - self._binding_at >= QUIET

    def tick(self, now: float, binding: bool) -> bool:
        """A tick saw the limit bind or not; whether that is a burst (it binds while quiet)."""
        burst = binding and self.quiet()
        if binding:
            self._binding_at = now
        else:
            self._idle_at = now
        return burst

    def in_force(self, controlled: int, whole: int | None, ceiling: int) -> int:
        """The limit in force: `controlled`, or while quiet at least `whole` (W) under `ceiling`."""
        if whole is None or not self.quiet():
            return controlled
        return max(controlled, min(whole, ceiling))
