"""Whether the `sla` controller keeps a probe up, as arithmetic on ledger entries."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from limits_helpers import ObsFactory

from gateway.control.algorithms.sla.ledger import Entry, Reading
from gateway.control.algorithms.sla.params import SLAParams
from gateway.control.algorithms.sla.verdicts import (
    COHORT_LEAST,
    Growth,
    cohort_p90,
    gains,
    growth_evidence,
    over_target,
    probe_kept,
    readings,
)
from gateway.types import SLA

P = SLAParams()  # min_gain 0.03, noise_z 2


def answers(limit: int, rate: float, finished: float) -> Entry:
    """`finished` whole answers over 10 s that delivered `rate` tokens/s (noise 1 / sqrt(finished))."""
    return Entry(limit, 0.0, tokens=10 * rate, seconds=10.0, finished=finished, lumped=10 * rate)


def streamed(limit: int, rate: float) -> Entry:
    return Entry(limit, 0.0, tokens=10 * rate, seconds=10.0, finished=50.0)


def test_streamed_tokens_decide_at_once_on_the_minimum_gain() -> None:
    assert probe_kept(streamed(24, 1040.0), streamed(18, 1000.0), P, True, False, good=False) is True
    assert probe_kept(streamed(24, 1020.0), streamed(18, 1000.0), P, True, True, good=False) is False


@pytest.mark.parametrize(
    ("rate", "more_time", "on_point", "kept"),
    [
        # 400 answers each: noise 5% a rate, 2 x hypot = 14%; a 20% gain is beyond it.
        (1200.0, False, False, True),
        # A gain the noise cannot exclude waits while there is time ...
        (1080.0, True, True, None),
        # ... then the point estimate decides the throughput climb ...
        (1080.0, False, True, True),
        (1020.0, False, True, False),
        # ... and a raise within target, which the SLA does not need, is undone.
        (1080.0, False, False, False),
        # A loss the noise cannot hide is undone at once.
        (800.0, True, True, False),
    ],
)
def test_whole_answers_wait_for_the_noise(
    rate: float, more_time: bool, on_point: bool, kept: bool | None
) -> None:
    assert (
        probe_kept(answers(24, rate, 400.0), answers(18, 1000.0, 400.0), P, more_time, on_point, good=False)
        is kept
    )


def test_a_raise_within_target_is_judged_on_goodput() -> None:
    # 24 streamed 20% more tokens than 18, but a quarter of them in answers that missed a target
    # (of 400 answers: the share met varies by 2%): 900 good tokens/s against 1,000.
    start = streamed(18, 1000.0)
    here = replace(streamed(24, 1200.0), finished=400.0, answered=4000.0, missed=1000.0)
    assert probe_kept(here, start, P, False, False, good=False) is True
    assert probe_kept(here, start, P, False, False, good=True) is False
    assert gains(start, here, P.min_gain, P.noise_z, good=True)
    assert not gains(start, here, P.min_gain, P.noise_z, good=False)


E2E_10S = SLA(e2e_p90=10.0)


def test_growth_stands_on_min_samples_values(obs: ObsFactory) -> None:
    o = obs(p90={"e2e": 5.0}, counts={"e2e": 20}, min_samples=20, kv_fits=20, kv_fits_whole=16)
    assert growth_evidence(o, E2E_10S, 0.5, 0.9) == Growth(0.5, 20)
    assert growth_evidence(o, E2E_10S, 0.95, 0.9) is None  # in the band: no growth at all


INF = math.inf


@pytest.mark.parametrize(
    ("cohort", "p90"),
    [
        ([1.0] * 7 + [2.5], (2.5, 8)),  # 8 finished: the largest
        ([1.0] * 7 + [INF], None),  # 8 with one in flight: unknown
        ([1.0] * 6 + [INF, 2.0, 3.0, 1.0], (3.0, 10)),  # 10 with one in flight: the 9th smallest
        ([1.0] * 7 + [INF, INF, 3.0, 2.0], None),  # 11 may not have two in flight, nor may 8-10
        ([1.0] * 6 + [INF] * 2 + [1.5] * 12, (1.5, 20)),  # 20 may have two
        ([1.0] * 7 + [2.5] + [INF] * 4, (2.5, 8)),  # the requests sent last, still in flight, left out
    ],
)
def test_the_cohort_p90_reads_the_requests_in_flight_as_the_slowest(
    cohort: list[float], p90: tuple[float, int] | None
) -> None:
    assert cohort_p90(cohort, COHORT_LEAST) == p90


def test_whole_answers_far_under_target_stand_on_a_cohort(obs: ObsFactory) -> None:
    """The P90 of the first requests sent at 0.25 of the target lets growth act on it before 20
    answers have come, as far as the KV cache holds requests at their full size."""
    cohort = [1.0] * (COHORT_LEAST - 1) + [2.5]
    o = obs(p90={"e2e": 2.0}, counts={"e2e": 12}, min_samples=20, cohorts={"e2e": cohort}, kv_fits=20)
    assert growth_evidence(o, E2E_10S, 0.2, 0.9) == Growth(0.25, 20, bounded=True)  # its ratio, the larger
    assert growth_evidence(replace(o, kv_fits_whole=16), E2E_10S, 0.2, 0.9) == Growth(0.25, 16, bounded=True)
    # A cohort too small, or not far enough under the target, stands for nothing.
    assert growth_evidence(replace(o, cohorts={"e2e": cohort[1:]}), E2E_10S, 0.2, 0.9) is None
    slow = [1.0] * (COHORT_LEAST - 1) + [3.1]
    assert growth_evidence(replace(o, cohorts={"e2e": slow}), E2E_10S, 0.2, 0.9) is None


def test_a_cohort_does_not_stand_in_for_a_stream_signal_short_of_values(obs: ObsFactory) -> None:
    sla = SLA(ttft_p90=1.0, e2e_p90=10.0)
    cohort = [1.0] * COHORT_LEAST
    o = obs(
        p90={"e2e": 1.0, "ttft": 0.1}, counts={"e2e": 8, "ttft": 8}, min_samples=20, cohorts={"e2e": cohort}
    )
    assert growth_evidence(o, sla, 0.1, 0.9) is None


STREAM_SLA = SLA(ttft_p90=1.0, tpot_p90=0.1)


def test_a_bursts_bounds_far_under_target_let_growth_act_before_min_samples(obs: ObsFactory) -> None:
    """Eight streams of a burst, every one measured at a fifth of the targets or less: a third of
    the band is room enough for the noise of their P90, so growth acts, on what the KV cache holds
    with every request whole."""
    bounds = {"ttft": [0.2] * COHORT_LEAST, "tpot": [0.01] * (COHORT_LEAST - 1) + [0.02]}
    o = obs(min_samples=20, bounds=bounds, kv_fits=30, kv_fits_whole=24)
    assert growth_evidence(o, STREAM_SLA, 0.0, 0.9) == Growth(0.2, 24, bounded=True)
    # One stream still waiting for its first token is read as the slowest: no P90 under target.
    waiting = {**bounds, "ttft": [0.2] * (COHORT_LEAST - 1) + [INF]}
    assert growth_evidence(replace(o, bounds=waiting), STREAM_SLA, 0.0, 0.9) is None
    # Too few, or not far enough under the target for so few.
    assert (
        growth_evidence(replace(o, bounds={k: v[1:] for k, v in bounds.items()}), STREAM_SLA, 0.0, 0.9)
        is None
    )
    near = {**bounds, "ttft": [0.4] * COHORT_LEAST}
    assert growth_evidence(replace(o, bounds=near), STREAM_SLA, 0.0, 0.9) is None


def test_bounds_pooled_with_the_epochs_values_need_only_the_band(obs: ObsFactory) -> None:
    values = {"ttft": [0.5] * 12, "tpot": [0.05] * 12}
    bounds = {"ttft": [0.7] * 8, "tpot": [0.08] * 8}
    o = obs(
        p90={"ttft": 0.5, "tpot": 0.05},
        counts={"ttft": 12, "tpot": 12},
        values=values,
        cohorts=values,
        min_samples=20,
    )
    assert growth_evidence(o, STREAM_SLA, 0.5, 0.9) is None  # 12 of 20 values, not far under target
    assert growth_evidence(replace(o, bounds=bounds), STREAM_SLA, 0.5, 0.9) == Growth(
        pytest.approx(0.8), None, bounded=True
    )
    slow = {**bounds, "tpot": [0.095] * 8}  # the pooled TPOT P90 in the band
    assert growth_evidence(replace(o, bounds=slow), STREAM_SLA, 0.5, 0.9) is None


def test_the_requests_sent_first_stand_without_a_settle_the_youngest_left_out(obs: ObsFactory) -> None:
    """Twenty requests well under target, in the order sent: growth need not wait for the settle,
    since none was left out for being slow. Three sent last still without a value are left out for
    their age; three sent first without one are in every prefix, read at their worst, and the P90
    stands on none: the values stand then only after the settle."""
    values = {"ttft": [0.3] * 20, "tpot": [0.03] * 20}
    o = obs(p90={"ttft": 0.3, "tpot": 0.03}, counts={"ttft": 20, "tpot": 20}, values=values, kv_fits=30)
    measured = replace(o, cohorts=values)
    assert growth_evidence(measured, STREAM_SLA, 0.3, 0.9) == Growth(0.3, 30, bounded=True)
    young = replace(o, cohorts={s: v + [INF] * 3 for s, v in values.items()})
    assert growth_evidence(young, STREAM_SLA, 0.3, 0.9) == Growth(0.3, 30, bounded=True)
    slow_first = replace(o, cohorts={s: [INF] * 3 + v for s, v in values.items()})
    assert growth_evidence(slow_first, STREAM_SLA, 0.3, 0.9) == Growth(0.3, 30, bounded=False)


def test_bounds_are_no_evidence_for_a_cut(obs: ObsFactory) -> None:
    o = obs(p90={"ttft": 0.5}, counts={"ttft": 20}, values={"ttft": [0.5] * 20}, bounds={"ttft": [3.0] * 8})
    assert over_target(o, STREAM_SLA, 0.01)[0] is None


def test_every_signal_on_evidence_is_read_not_only_the_worst(obs: ObsFactory) -> None:
    sla = SLA(ttft_p90=0.05, tpot_p90=0.002, e2e_p90=10.0)
    o = obs(
        p90={"ttft": 2.5, "tpot": 0.006, "e2e": 4.0},
        values={"ttft": [2.5] * 15, "tpot": [0.006] * 4, "e2e": [4.0] * 3},
        counts={"ttft": 15, "tpot": 4, "e2e": 3},
        min_samples=20,
    )
    # TTFT and TPOT are over target beyond chance (15 of 15, 4 of 4 values); e2e's 3 values under
    # target say nothing yet.
    assert readings(o, sla, 0.01) == {"ttft": Reading(50.0, 2.5), "tpot": Reading(3.0, 0.006)}
    # On min_samples values a P90 stands whether over or under its target.
    o = obs(p90={"e2e": 4.0}, values={"e2e": [4.0] * 20}, counts={"e2e": 20}, min_samples=20)
    assert readings(o, sla, 0.01) == {"e2e": Reading(0.4, 4.0)}
