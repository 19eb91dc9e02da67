"""Quotas counted in this process: each tenant's two buckets and its requests under way. Pure.

What a gateway without `state.redis_url` enforces, and what each replica enforces as its share
while Redis cannot be reached (gateway.tenancy.gate). The arithmetic is gateway.tenancy.buckets';
the time is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.tenancy.buckets import Bucket, Limits, Verdict

CONCURRENT_RETRY = 1.0
"""Retry-After for a tenant at its concurrent requests: when one of them ends is not known."""


@dataclass(slots=True)
class _Account:
    tokens: Bucket | None = None
    requests: Bucket | None = None
    held: int = 0
    limits: Limits = field(default_factory=Limits)


class QuotaBook:
    def __init__(self) -> None:
        self._accounts: dict[str, _Account] = {}

    def admit(self, tenant: str, limits: Limits, prompt_tokens: float, now: float) -> Verdict:
        """Take one request and its prompt from the tenant's quotas if all of them allow it."""
        a = self._account(tenant, limits, now)
        waits: dict[str, float] = {}
        if a.tokens is not None:
            waits["tokens"] = a.tokens.wait(prompt_tokens, now)
        if a.requests is not None:
            waits["requests"] = a.requests.wait(1.0, now)
        if limits.max_concurrent is not None and a.held >= limits.max_concurrent:
            waits["concurrent"] = CONCURRENT_RETRY
        refused = {k: w for k, w in waits.items() if w > 0}
        if not refused:
            if a.tokens is not None:
                a.tokens.take(prompt_tokens, now)
            if a.requests is not None:
                a.requests.take(1.0, now)
            a.held += 1
        reason = max(refused, key=lambda k: refused[k]) if refused else ""
        return self._verdict(a, limits, now, not refused, max(refused.values(), default=0.0), reason)

    def take(self, tenant: str, limits: Limits, prompt_tokens: float, now: float) -> Verdict:
        """Take one request and its prompt without refusing (a batch line): it may go into debt."""
        a = self._account(tenant, limits, now)
        if a.tokens is not None:
            a.tokens.take(prompt_tokens, now)
        if a.requests is not None:
            a.requests.take(1.0, now)
        return self._verdict(a, limits, now, True, 0.0, "")

    def charge(self, tenant: str, limits: Limits, tokens: float, now: float) -> None:
        """Tokens learned after admission (output, the prompt's correction): may go into debt."""
        a = self._account(tenant, limits, now)
        if a.tokens is not None and tokens:
            a.tokens.take(tokens, now)

    def release(self, tenant: str) -> None:
        a = self._accounts.get(tenant)
        if a is not None and a.held > 0:
            a.held -= 1

    def held(self, tenant: str) -> int:
        a = self._accounts.get(tenant)
        return a.held if a is not None else 0

    def _account(self, tenant: str, limits: Limits, now: float) -> _Account:
        a = self._accounts.get(tenant)
        if a is None:
            a = self._accounts[tenant] = _Account()
        if a.limits != limits:
            a.tokens = _resized(a.tokens, limits.tokens_per_minute, now)
            a.requests = _resized(a.requests, limits.requests_per_minute, now)
            a.limits = limits
        return a

    @staticmethod
    def _verdict(a: _Account, limits: Limits, now: float, ok: bool, retry: float, reason: str) -> Verdict:
        return Verdict(
            allowed=ok,
            limits=limits,
            remaining_tokens=a.tokens.level if a.tokens is not None else None,
            remaining_requests=a.requests.level if a.requests is not None else None,
            reset_tokens=a.tokens.reset(now) if a.tokens is not None else 0.0,
            reset_requests=a.requests.reset(now) if a.requests is not None else 0.0,
            retry_after=retry,
            reason=reason,
        )


def _resized(bucket: Bucket | None, capacity: int | None, now: float) -> Bucket | None:
    """A bucket for a new capacity: a new quota starts full; a changed one keeps its level, capped."""
    if capacity is None:
        return None
    if bucket is None:
        return Bucket.full(capacity, now)
    bucket.refill(now)
    return Bucket(capacity, min(bucket.level, capacity), now)
