"""When a client refused at the connection cap should come back: a Retry-After from what drains.

At `listen.max_connections` with no idle connection to close, a newcomer gets 503. A fixed
Retry-After would bring every client refused in the same second back in the same second, to meet
the same full set of connections: the refusals would come in waves. Instead:
- Room appears as connections close, so their close rate r is measured, as a bias-corrected
  exponentially weighted event rate (`DrainRate`, always backlogged: time constant `tau`, 5 s, and
  its 1 s fast estimate, so a rise shows within a second).
- The refused are booked one close apart (`RetryAdvice`): the n-th refusal of a wave is told
  max(1 / r, previous booking + 1 / r), so the returns of the next T seconds never exceed the
  r x T connections that free up in them.
- No answer exceeds 60 s, the longest wait every OpenAI SDK honours. With no rate yet (fewer than
  `min_events` closes seen), or a booking past 60 s plus `horizon`, the refusals are spread over
  [floor, horizon] along the golden-ratio sequence (evenly, however many): they are judged again,
  on a measured rate, when they return.
- Each answer gets a random jitter of up to one booking interval (1 / r, at most `floor`), so
  that clients booked side by side, and their own retry timers, do not land on one instant.

Pure: clock readings are passed in, and the random source is injected.
"""

from __future__ import annotations

import random

from gateway.admission.advice import RetryAdvice
from gateway.admission.drain import DrainRate
from gateway.admission.rejection import MIN_RETRY_AFTER, SDK_MAX_RETRY_AFTER

FOLD = 0.05
"""Seconds between updates of the close rate; closes in between are counted and added at once."""


class ConnectionAdvice:
    def __init__(
        self,
        *,
        now: float,
        rng: random.Random,
        floor: float = 1.0,
        horizon: float = 10.0,
        tau: float = 5.0,
        min_events: int = 8,
    ) -> None:
        if not 0 < floor <= horizon:
            raise ValueError(f"need 0 < floor <= horizon, got floor={floor!r}, horizon={horizon!r}")
        self.floor = floor
        self.horizon = horizon
        self._closes = DrainRate(tau=tau, min_backlog=tau, min_events=min_events, now=now)
        self._closes.set_backlogged(now, True)  # a plain rate over wall-clock time
        self._advice = RetryAdvice(floor=floor)
        self._rng = rng
        self._unfolded = 0
        self._folded_at = now

    def closed(self, now: float) -> None:
        """A connection closed: one more place free. Counted, and folded into the rate at most
        every `FOLD` seconds: a flood of short connections closes thousands a second."""
        self._unfolded += 1
        if now - self._folded_at >= FOLD:
            self._fold(now)

    def _fold(self, now: float) -> None:
        if self._unfolded:
            self._closes.record(now, self._unfolded)
            self._unfolded = 0
        self._folded_at = now

    def rate(self, now: float) -> float | None:
        """Connections closed per second, None until measured."""
        self._fold(now)
        return self._closes.rate(now)

    def retry_after(self, now: float) -> float:
        """Seconds until one more refused client should come back."""
        rate = self.rate(now)
        wait = None if rate is None or rate <= 0 else 1.0 / rate
        seconds = self._advice.advise(now, wait, rate, firm=wait is not None, horizon=self.horizon)
        if seconds >= SDK_MAX_RETRY_AFTER:  # no queue takes an early return: spread, judged again
            seconds = self._advice.spread(self.horizon)
        jitter = self._rng.uniform(0.0, min(self.floor, wait or self.floor))
        return max(MIN_RETRY_AFTER, seconds + jitter)
