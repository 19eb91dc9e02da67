"""Per-minute quotas as token buckets: the arithmetic, pure (no clock, no I/O).

A quota of N per minute is a bucket of capacity N refilled continuously at N / 60 per second
(the token bucket; OpenAI's API limits behave the same way: its `x-ratelimit-reset-*` headers give
the time until the bucket is full again). A full bucket admits a burst of N; over any span T the
bucket lets through at most N + T * N / 60, so over minutes the rate converges on N per minute.

The level after refilling for dt seconds is min(N, level + dt * N / 60). A request needs:
- requests: one unit;
- tokens: its estimated prompt (at most the capacity, so a prompt larger than the quota still gets
  through when the bucket is full), taken at admission. Output tokens and the prompt's correction are
  taken as they become known and may drive the level below zero: a long answer is never cut, and
  the next request waits until the bucket refills past what it needs.

`Retry-After` is the time until every refused bucket holds what the request needs:
(need - level) / rate. The same arithmetic runs in Redis (gateway.tenancy.redis_quota) with the
server's clock; this module is the local one and the model the tests check against.
"""

from __future__ import annotations

from dataclasses import dataclass

WINDOW = 60.0
"""Seconds the per-minute quotas are counted over."""


@dataclass(slots=True)
class Bucket:
    capacity: float
    level: float
    at: float
    """Clock time of `level`."""

    @classmethod
    def full(cls, capacity: float, now: float) -> Bucket:
        return cls(capacity, capacity, now)

    @property
    def rate(self) -> float:
        return self.capacity / WINDOW

    def refill(self, now: float) -> float:
        if now > self.at:
            self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
            self.at = now
        return self.level

    def need(self, amount: float) -> float:
        """What must be in the bucket to take `amount` (never more than a full bucket)."""
        return min(max(amount, 0.0), self.capacity)

    def wait(self, amount: float, now: float) -> float:
        """Seconds until the bucket holds `need(amount)`; 0 if it does now."""
        short = self.need(amount) - self.refill(now)
        return max(0.0, short / self.rate) if self.capacity > 0 else 0.0

    def take(self, amount: float, now: float) -> None:
        """Spend `amount` (a refund when negative, never past full)."""
        self.level = min(self.capacity, self.refill(now) - amount)

    def reset(self, now: float) -> float:
        """Seconds until the bucket is full again."""
        return max(0.0, (self.capacity - self.refill(now)) / self.rate)


@dataclass(frozen=True, slots=True)
class Limits:
    """A tenant's quotas; None is unlimited."""

    tokens_per_minute: int | None = None
    requests_per_minute: int | None = None
    max_concurrent: int | None = None

    def scaled(self, share: int) -> Limits:
        """This replica's part when `share` replicas enforce the quota without seeing each other:
        floor(limit / share), at least 1, so together they stay at or under it and none stops."""
        if share <= 1:
            return self

        def part(limit: int | None) -> int | None:
            return None if limit is None else max(1, limit // share)

        return Limits(part(self.tokens_per_minute), part(self.requests_per_minute), part(self.max_concurrent))


@dataclass(frozen=True, slots=True)
class Verdict:
    """A quota decision and what the `x-ratelimit-*` headers say about it."""

    allowed: bool
    limits: Limits
    remaining_tokens: float | None = None
    remaining_requests: float | None = None
    reset_tokens: float = 0.0
    reset_requests: float = 0.0
    retry_after: float = 0.0
    """Seconds until the refused request would be admitted (0 when allowed)."""
    reason: str = ""
    """Which quota refused it: 'tokens', 'requests' or 'concurrent'."""
