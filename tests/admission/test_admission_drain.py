"""DrainRate: dispatches per second, counted only while requests wait."""

from __future__ import annotations

import math

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
    d = DrainRate(tau=5.0, min_backlog=0.0, forget_after=60.0, now=0.0)
    d.set_backlogged(0.0, True)
    for i in range(1, 21):
        d.record(i * 0.5)  # 2 per second
    before = d.rate(10.0)
    d.set_backlogged(10.0, False)
    assert d.rate(69.0) == before  # nothing waited, nothing was learned
    d.set_backlogged(69.0, True)
    d.record(69.5)
    assert d.rate(69.5) == pytest.approx(2.0, rel=0.1)


def test_evidence_older_than_the_idle_limit_is_forgotten_and_measured_anew() -> None:
    """An outage leaves a rate near zero; after a long idle the next burst must not be judged on it."""
    d = DrainRate(tau=10.0, min_backlog=1.0, forget_after=10.0, now=0.0)
    d.set_backlogged(0.0, True)
    for i in range(1, 21):
        d.record(i * 0.5)
    hung = d.rate(40.0)  # 30 s backlogged without a dispatch
    assert hung is not None and hung < 0.2
    d.record(40.0, 3)  # it recovers, drains what waited
    d.set_backlogged(40.0, False)
    assert d.rate(49.9) is not None  # idle for less than the limit: still the old evidence
    assert d.rate(50.0) is None and not d.firm(50.0)  # idle for the limit: forgotten
    d.set_backlogged(70.0, True)
    assert d.events == 0 and d.backlog(70.0) == 0.0
    d.record(70.5, 2)
    d.record(71.0, 2)
    assert d.rate(71.0) == pytest.approx(4.0, rel=0.05)  # only what the new backlog showed


def test_a_rise_is_followed_within_seconds_by_the_fast_estimate() -> None:
    both = DrainRate(tau=10.0, fast_tau=1.0, fast_events=20, min_backlog=1.0, now=0.0)
    slow = DrainRate(tau=10.0, fast_tau=1.0, fast_events=math.inf, min_backlog=1.0, now=0.0)
    for d in (both, slow):
        d.set_backlogged(0.0, True)
    t = 0.0
    for _ in range(100):  # 10/s for 10 s
        t += 0.1
        for d in (both, slow):
            d.record(t)
    assert both.rate(t) == pytest.approx(10.0, rel=0.05)
    for _ in range(900):  # then 300/s for 3 s: 1 - exp(-3) of the way for a 1 s time constant
        t += 1 / 300
        for d in (both, slow):
            d.record(t)
    assert both.rate(t) == pytest.approx(300.0 - 290.0 * math.exp(-3.0), rel=0.02)
    # The slow one alone: 10 s of 10/s decayed for 3 s plus 3 s of 300/s, over the window's weight.
    window = 10.0 * 10.0 * -math.expm1(-1.0) * math.exp(-0.3) + 300.0 * 10.0 * -math.expm1(-0.3)
    assert slow.rate(t) == pytest.approx(window / (10.0 * -math.expm1(-1.3)), rel=0.02)
    assert slow.rate(t) < 120


def test_the_fast_estimate_needs_enough_dispatches_to_count() -> None:
    d = DrainRate(tau=10.0, fast_tau=1.0, fast_events=20, min_backlog=0.0, now=0.0)
    d.set_backlogged(0.0, True)
    d.record(5.0, 10)  # 10 at once after 5 s: 2/s on the slow clock; too few for the fast one
    slow_only = 10 / (10.0 * -math.expm1(-5.0 / 10.0))
    assert d.rate(5.0) == pytest.approx(slow_only)


def test_firm_only_after_the_firm_backlog() -> None:
    d = DrainRate(tau=10.0, min_backlog=1.0, now=0.0)
    d.set_backlogged(0.0, True)
    d.record(0.5)
    assert d.rate(0.9) is None and not d.firm(0.9)
    assert d.rate(1.0) is not None and not d.firm(9.99)
    assert d.firm(10.0)  # tau seconds of backlog by default
    d.set_backlogged(10.0, False)
    assert d.firm(15.0)  # a short idle keeps what was learned


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
