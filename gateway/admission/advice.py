"""When to tell a refused client to come back: the Retry-After of a shed request.

Every refused client comes back (the OpenAI SDK retries twice, waiting what it is told), so telling
a burst of them one wait brings them back together, to be refused together again, and the SDK's
attempts run out. So the returns are booked one slot apart at the measured drain rate r: the n-th
refusal of a burst is told max(its own wait, previous booking + 1 / r), which is when a slot would
be free for it if everyone told earlier returned on time. The bookings of the next T seconds never
exceed what the backends drain in T (r x T), and the last of a burst is told about the time it
takes to serve the burst. Only clients that will return hold a booking; bookings in the past lapse
by themselves.

How far a booking may reach depends on how much the rate is worth (see `drain.py`):
- firm: as far as every OpenAI SDK waits as told (`SDK_MAX_RETRY_AFTER`, 60 s). A booking up to
  the horizon H (the queue's timeout) beyond that is told 60 s and still booked: back then, its
  expected wait is at most H, so the queue takes it and serves it within its deadline. Only past
  60 s + H, when even the longest wait the SDK honours and a full deadline in the queue cannot reach
  its turn, is the advice longer than 60 s (sent with `x-should-retry: false`, booking nothing):
  telling a client not to retry while the backends could still serve it loses a request for nothing.
- measured but not firm: at half the rate (`YOUNG_SHARE`), within the horizon H, the queue's
  timeout. H is the one bound the queue can vouch for without a rate: every waiter now queued is
  served or expired within it, so room certainly appears within H. A young rate can also be
  several times too low (a cold gateway taking in a burst of thousands dispatches a tenth of what
  it does seconds later), and a booking past H on it would send clients away for minutes that the
  backends need seconds for.
- unknown, or a booking that would pass H: the k-th such client is placed in [floor, H] at the
  fraction frac(k / phi) of the way (phi the golden ratio: 0.618, 0.236, 0.854, 0.472, ...), a
  sequence every stretch of which is evenly spread, however many are refused and whichever of them
  are advised again later; it is judged again, on firmer evidence, when it returns. With a young
  rate the spread starts no sooner than the client's own wait at that rate (at most H / 2): while a
  cold gateway's limits climb, returns spread from the first second met a full queue twice, and the
  SDK's third attempt with it.

Pure: the clock reading is passed in.
"""

from __future__ import annotations

import math

from gateway.admission.rejection import SDK_MAX_RETRY_AFTER

_INVERSE_PHI = (math.sqrt(5.0) - 1.0) / 2.0

YOUNG_SHARE = 0.5
"""Share of a rate that is not firm that returns are booked at: measured over a second or two it can
be off by half either way, and returns booked faster than the backends drain meet a full queue
again (500 SDK clients refused by a queue of 25 on a busy machine lost 26 after three attempts)."""


def golden(k: int) -> float:
    """frac(k / phi): the k-th term (k >= 1) of the golden-ratio sequence, in (0, 1)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return (k * _INVERSE_PHI) % 1.0


class RetryAdvice:
    def __init__(self, *, floor: float) -> None:
        if not 0 < floor < math.inf:
            raise ValueError(f"floor must be finite and > 0, got {floor!r}")
        self.floor = floor
        """Shortest advice given without a rate."""
        self._booked = -math.inf
        """When the latest client told to come back was booked (clock seconds)."""
        self._spread = 0

    def advise(
        self, now: float, wait: float | None, rate: float | None, *, firm: bool, horizon: float
    ) -> float:
        """Seconds until one more refused client should come back.

        `wait` is its own expected wait at `rate` (None when the rate is unknown); `firm` says
        whether the rate may be trusted beyond `horizon` (the queue's timeout).
        """
        if wait is None or rate is None or rate <= 0 or not math.isfinite(wait):
            return self.spread(horizon) if wait is None or not firm else wait
        own_wait = wait
        if not firm:
            rate, wait = rate * YOUNG_SHARE, wait / YOUNG_SHARE
        at = max(now + wait, self._booked + 1.0 / rate)
        if not firm:
            if at - now <= min(horizon, SDK_MAX_RETRY_AFTER):
                self._booked = at
                return at - now
            return self.spread(horizon, earliest=min(horizon / 2, own_wait))
        if at - now <= SDK_MAX_RETRY_AFTER + horizon:
            self._booked = at
            return min(at - now, SDK_MAX_RETRY_AFTER)
        return at - now

    def spread(self, horizon: float, *, earliest: float = 0.0) -> float:
        """Seconds within [max(floor, earliest), horizon] (horizon at most what the SDK waits for)
        for one more client refused without a usable booking."""
        top = min(horizon, SDK_MAX_RETRY_AFTER)
        low = min(max(self.floor, earliest), top)
        self._spread += 1
        return low + (top - low) * golden(self._spread)
