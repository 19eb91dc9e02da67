"""DrainRate: dispatches per second, counted only while requests wait."""

from __future__ import annotations

import pytest

from gateway.admission.drain import DrainRate
from gateway.admission.rejection import SDK_MAX_RETRY_AFTER, Rejected


def test_steady_rate_is_measured_from_the_first_seconds() -> None:
    d = DrainRate(tau=10.0, min_backlog=1.0, now=0.0)
    d.set_backlogged(0.0, True)
    assert d.rate(0.5) is None
    t = 0.0
    for _ in range(8):  # 4 per second for 2 s
        t += 0.25
        d.record(t)
    assert d.rate(t) == pytest.approx(4.0, rel=0.1)
    for _ in range(400):  # then 4 per second for 100 s
        t += 0.25
        d.record(t)
    assert d.rate(t) == pytest.approx(4.0, rel=0.05)


def test_idle_time_does_not_dilute_the_rate() -> None:
    d = DrainRate(tau=5.0, min_backlog=0.0, now=0.0)
    d.set_backlogged(0.0, True)
    for i in range(1, 21):
        d.record(i * 0.5)  # 2 per second
    before = d.rate(10.0)
    d.set_backlogged(10.0, False)
    assert d.rate(500.0) == before  # nothing waited, nothing was learned
    d.set_backlogged(500.0, True)
    d.record(500.5)
    assert d.rate(500.5) == pytest.approx(2.0, rel=0.1)


def test_a_stall_decays_the_rate_towards_zero() -> None:
    d = DrainRate(tau=2.0, min_backlog=0.0, now=0.0)
    d.set_backlogged(0.0, True)
    for i in range(1, 11):
        d.record(i * 0.1)
    fast = d.rate(1.0)
    assert fast is not None
    stalled = d.rate(11.0)
    assert stalled is not None and stalled < fast * 0.01


def test_a_burst_at_one_instant_counts_every_dispatch() -> None:
    d = DrainRate(tau=10.0, min_backlog=0.0, now=0.0)
    d.set_backlogged(0.0, True)
    d.record(2.0, n=6)
    assert d.rate(2.0) == pytest.approx(6 / 2.0, rel=0.15)


def test_nothing_dispatched_yet_is_unknown_not_zero() -> None:
    d = DrainRate(tau=10.0, min_backlog=1.0, now=0.0)
    d.set_backlogged(0.0, True)
    assert d.rate(30.0) is None


def test_rejection_advice_follows_the_sdk_limits() -> None:
    soon = Rejected("queue_full", retry_after=2.345, message="full")
    assert soon.status == 429 and soon.should_retry and soon.retry_after == 2.345
    late = Rejected("queue_timeout", retry_after=SDK_MAX_RETRY_AFTER + 1, message="slow")
    assert late.status == 503 and not late.should_retry
    never = Rejected("deadline", retry_after=float("inf"), message="stalled")
    assert not never.should_retry and never.retry_after > SDK_MAX_RETRY_AFTER
    assert Rejected("queue_full", retry_after=0.0, message="x").retry_after > 0
