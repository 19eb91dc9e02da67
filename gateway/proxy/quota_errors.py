"""The answer to a request over its tenant's quota: 429 `rate_limit_exceeded`, as OpenAI words it.

`Retry-After` (and `retry-after-ms`, which the OpenAI SDK reads first) is when the refusing quota
will have room for the request; the `x-ratelimit-*` headers give the tenant's state as OpenAI's
API does. `x-should-retry: true`: waiting that long is exactly what the client should do.
"""

from __future__ import annotations

import math

from gateway.proxy.errors import GatewayError
from gateway.tenancy.buckets import Verdict
from gateway.tenancy.headers import duration, rate_limit_headers

_WHAT = {
    "tokens": ("tokens per min (TPM)", "tokens_per_minute"),
    "requests": ("requests per min (RPM)", "requests_per_minute"),
    "concurrent": ("concurrent requests", "max_concurrent"),
}


def over_quota(tenant: str, verdict: Verdict) -> GatewayError:
    label, field = _WHAT.get(verdict.reason, _WHAT["requests"])
    limit = getattr(verdict.limits, field)
    remaining = {"tokens": verdict.remaining_tokens, "requests": verdict.remaining_requests}.get(
        verdict.reason
    )
    left = "" if remaining is None else f", Remaining {max(0, int(remaining))}"
    # Whole milliseconds, rounded up: a client waiting exactly this long finds the room there.
    retry_after = math.ceil(verdict.retry_after * 1000) / 1000
    return GatewayError(
        429,
        f"Rate limit reached for tenant {tenant!r} on {label}: Limit {limit}{left}. "
        f"Please try again in {duration(retry_after)}.",
        "rate_limit_exceeded",
        retry_after=retry_after,
        should_retry=True,
        extra_headers=rate_limit_headers(verdict),
    )
