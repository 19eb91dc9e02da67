"""Per-minute quotas counted in one process (token buckets), on an injected clock."""

from __future__ import annotations

import pytest

from gateway.tenancy.buckets import Limits
from gateway.tenancy.headers import duration, rate_limit_headers
from gateway.tenancy.local import QuotaBook


def test_requests_per_minute_admit_a_full_bucket_then_one_per_refill() -> None:
    book, limits = QuotaBook(), Limits(requests_per_minute=60)
    assert all(book.admit("t", limits, 0, 0.0).allowed for _ in range(60))
    refused = book.admit("t", limits, 0, 0.0)
    assert not refused.allowed and refused.reason == "requests"
    assert refused.retry_after == pytest.approx(1.0)  # 60 per minute: one more each second
    assert book.admit("t", limits, 0, 1.0).allowed
    assert not book.admit("t", limits, 0, 1.0).allowed


def test_tokens_go_into_debt_and_retry_after_is_when_the_prompt_fits() -> None:
    book, limits = QuotaBook(), Limits(tokens_per_minute=6000)
    first = book.admit("t", limits, 1000, 0.0)
    assert first.allowed and first.remaining_tokens == pytest.approx(5000)
    book.charge("t", limits, 8000, 0.0)  # a long answer crosses the quota: charged, not cut
    refused = book.admit("t", limits, 1000, 0.0)
    assert not refused.allowed and refused.reason == "tokens"
    # Level -3,000 needs 1,000: 4,000 tokens at 100 per second.
    assert refused.retry_after == pytest.approx(40.0)
    assert refused.reset_tokens == pytest.approx(90.0)
    assert book.admit("t", limits, 1000, 40.0).allowed


def test_a_prompt_larger_than_the_quota_passes_on_a_full_bucket() -> None:
    book, limits = QuotaBook(), Limits(tokens_per_minute=100)
    assert book.admit("t", limits, 500, 0.0).allowed
    assert not book.admit("t", limits, 1, 0.0).allowed


def test_concurrent_requests_are_held_until_finished() -> None:
    book, limits = QuotaBook(), Limits(max_concurrent=2)
    assert book.admit("t", limits, 0, 0.0).allowed
    assert book.admit("t", limits, 0, 0.0).allowed
    assert book.admit("t", limits, 0, 0.0).reason == "concurrent"
    book.release("t")
    assert book.admit("t", limits, 0, 0.0).allowed
    assert book.admit("u", limits, 0, 0.0).allowed  # tenants are apart


def test_a_replica_share_divides_every_quota() -> None:
    assert Limits(9000, 90, 9).scaled(3) == Limits(3000, 30, 3)
    assert Limits(2, 2, 2).scaled(3) == Limits(1, 1, 1)  # never 0
    assert Limits(10, None, None).scaled(1) == Limits(10, None, None)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.0121, "13ms"), (1, "1s"), (1.5, "1.5s"), (360, "6m0s"), (3723.25, "1h2m3.25s")],
)
def test_durations_are_written_as_openai_writes_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_headers_name_only_the_quotas_a_tenant_has() -> None:
    book = QuotaBook()
    verdict = book.admit("t", Limits(requests_per_minute=10), 0, 0.0)
    headers = dict(rate_limit_headers(verdict))
    assert headers == {
        b"x-ratelimit-limit-requests": b"10",
        b"x-ratelimit-remaining-requests": b"9",
        b"x-ratelimit-reset-requests": b"6s",
    }
