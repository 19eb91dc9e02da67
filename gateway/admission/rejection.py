"""Refusals: the status, reason and retry advice a shed request is answered with.

Retry advice follows what the OpenAI Python SDK does with it (openai-python,
`src/openai/_base_client.py`):
- `_calculate_retry_timeout` sleeps for the server's `retry-after-ms`, else `retry-after`, only when
  `0 < retry_after <= 60` in the 1.x releases (`<= MAX_RETRY_AFTER_DELAY`, 120 s, in later ones);
  a longer value falls back to its own backoff of 0.5 s doubling up to 8 s, so the 1.x client
  would come back within seconds instead of waiting;
- `_should_retry` obeys `x-should-retry: true|false` before looking at the status code (and in
  the later releases refuses outright a Retry-After over 120 s).
So the advice is at most 60 s whenever coming back can still be served: a client told 60 s then
waits in the queue for up to its deadline (see `advice.py`). Only an estimate past both is sent as
it is, with `x-should-retry: false`: no client waits that long, and retrying sooner only adds load
to a saturated queue.
"""

from __future__ import annotations

import math
from typing import Literal

RejectReason = Literal[
    "queue_full", "deadline", "tenant_over_share", "queue_timeout", "no_backend", "shutting_down"
]

SDK_MAX_RETRY_AFTER = 60.0
"""Longest Retry-After, in seconds, that every OpenAI SDK release waits for as told."""

MIN_RETRY_AFTER = 0.05
"""Floor on the advice, so a client never retries in a tight loop."""

STATUS: dict[RejectReason, int] = {
    "queue_full": 429,
    "deadline": 429,
    "tenant_over_share": 429,
    "queue_timeout": 503,
    "no_backend": 503,
    "shutting_down": 503,
}


class Rejected(Exception):
    """A request the admission queue refused; carries everything its HTTP answer needs (the API
    answers it as a GatewayError with these fields)."""

    def __init__(
        self,
        reason: RejectReason,
        *,
        retry_after: float,
        message: str,
        should_retry: bool | None = None,
    ):
        super().__init__(message)
        self.reason: RejectReason = reason
        self.status = STATUS[reason]
        if not math.isfinite(retry_after):
            retry_after = SDK_MAX_RETRY_AFTER * 5
        self.retry_after = max(MIN_RETRY_AFTER, retry_after)
        self.should_retry = self.retry_after <= SDK_MAX_RETRY_AFTER if should_retry is None else should_retry
        self.message = message

    def __repr__(self) -> str:
        return (
            f"Rejected({self.status}, {self.reason!r}, retry_after={self.retry_after:.3f}, "
            f"should_retry={self.should_retry})"
        )
