"""OpenAI's rate-limit headers for a quota decision (`x-ratelimit-limit-*`, `-remaining-*`, `-reset-*`).

The reset values are durations as OpenAI writes them (Go's duration format): "6m0s", "1s",
"12ms", "1h2m3.5s"; clients parse them with Go's `time.ParseDuration` or similar. Remaining counts
are whole numbers, never negative (a bucket in debt has 0 remaining). Only the quotas a tenant has
are reported: a tenant without a token quota gets no token headers.
"""

from __future__ import annotations

import math

from gateway.tenancy.buckets import Verdict


def duration(seconds: float) -> str:
    """`seconds` as Go formats a duration, at millisecond precision: 0s, 250ms, 1s, 1.5s, 6m0s."""
    ms = max(0, math.ceil(seconds * 1000 - 1e-6))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest // 1000}" + (f".{rest % 1000:03d}".rstrip("0") if rest % 1000 else "")
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def rate_limit_headers(v: Verdict) -> tuple[tuple[bytes, bytes], ...]:
    out: list[tuple[bytes, bytes]] = []
    rpm, tpm = v.limits.requests_per_minute, v.limits.tokens_per_minute
    if rpm is not None:
        out.append((b"x-ratelimit-limit-requests", str(rpm).encode()))
        out.append((b"x-ratelimit-remaining-requests", _count(v.remaining_requests)))
        out.append((b"x-ratelimit-reset-requests", duration(v.reset_requests).encode()))
    if tpm is not None:
        out.append((b"x-ratelimit-limit-tokens", str(tpm).encode()))
        out.append((b"x-ratelimit-remaining-tokens", _count(v.remaining_tokens)))
        out.append((b"x-ratelimit-reset-tokens", duration(v.reset_tokens).encode()))
    return tuple(out)


def _count(value: float | None) -> bytes:
    return str(max(0, math.floor(value or 0.0))).encode()
