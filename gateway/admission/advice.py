"""When to tell a refused client to come back: the Retry-After of a shed request.

Every refused client comes back (the OpenAI SDK retries twice, waiting what it is told), so telling
a burst of them one wait brings them back together, to be refused together again, and the SDK's
attempts run out. The advice therefore spreads the returns, in one of two ways:

- With a firm drain rate r (see `drain.py`), returns are booked one slot apart: the n-th refusal in a
  burst is told max(its own wait, previous booking + 1 / r), which is when a slot would be free for
  it if everyone told earlier returned on time. So the bookings of the next T seconds never exceed
  what the backends drain in T (r x T), and the last of a burst is told about the time it takes to
  serve the burst. Only clients that will return hold a booking: advice beyond what the SDK waits
  for (`SDK_MAX_RETRY_AFTER`) goes with `x-should-retry: false` and books nothing, and bookings in
  the past lapse by themselves.
- Without one (a cold queue, or a rate not yet measured over enough backlog), the one certain
  bound is the queue's timeout H: every waiter now queued is served or expired within H, so room
  certainly appears within it. Refusals are spread evenly over [floor, H] by the van der Corput
  sequence (k-th value: the binary digits of k mirrored behind the point: 1/2, 1/4, 3/4, 1/8, ...),
  every prefix of which is evenly spread, however many are refused; they are judged again, on
  firmer evidence, when they return.

Pure: the clock reading is passed in.
"""

from __future__ import annotations

import math

from gateway.admission.rejection import SDK_MAX_RETRY_AFTER


def van_der_corput(k: int) -> float:
    """The k-th term (k >= 1) of the base-2 van der Corput sequence, in (0, 1)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    value, scale = 0.0, 0.5
    while k:
        if k & 1:
            value += scale
        k >>= 1
        scale /= 2
    return value


class RetryAdvice:
    def __init__(self, *, floor: float, horizon: float) -> None:
        if not 0 < floor < math.inf or not 0 < horizon < math.inf:
            raise ValueError(f"floor and horizon must be finite and > 0, got {floor!r}, {horizon!r}")
        self.floor = min(floor, horizon)
        self.horizon = min(horizon, SDK_MAX_RETRY_AFTER)
        """Longest advice given without a firm rate; never more than the SDK waits for."""
        self._booked = -math.inf
        """When the latest client told to come back was booked (clock seconds)."""
        self._spread = 0

    def booked(self, now: float, wait: float, rate: float) -> float:
        """Seconds until a slot is free for one more refused client, at a firm `rate` > 0."""
        if not math.isfinite(wait) or rate <= 0:
            return wait
        at = max(now + wait, self._booked + 1.0 / rate)
        if at - now <= SDK_MAX_RETRY_AFTER:
            self._booked = at
        return at - now

    def spread(self) -> float:
        """Seconds within [floor, horizon] for one more client refused without a firm rate."""
        self._spread += 1
        return self.floor + (self.horizon - self.floor) * van_der_corput(self._spread)
