"""Envoy's gradient arithmetic: gradient = minRTT (1 + buffer) / sampleRTT in [0.5, 2], L' = gL + sqrt(gL)."""

from __future__ import annotations

import math

import pytest
from limits_helpers import ObsFactory, make_obs

from gateway.control.algorithms import GradientLimit, create
from gateway.types import SLA, Observation


def measured(min_rtt: float = 0.02, **params: object) -> GradientLimit:
    """A controller that has finished its minRTT probe at `min_rtt` s per token."""
    a = create("gradient", {"min_rtt_interval": 0, **params}, SLA())
    assert isinstance(a, GradientLimit)
    d = a.update(make_obs(limit=3, sample_count=8, p90_e2e_per_token=min_rtt))
    assert d.reason == "min_rtt_measured"
    assert a.min_rtt == min_rtt
    return a


def test_probe_first_then_restore() -> None:
    a = create("gradient", {}, SLA())
    assert a.initial_limit(1, 100) == 3
    d = a.update(make_obs(limit=3, sample_count=2, p90_e2e_per_token=0.02))
    assert (d.limit, d.reason) == (3, "measuring_min_rtt")
    d = a.update(make_obs(limit=3, sample_count=8, p90_e2e_per_token=0.02))
    assert (d.limit, d.reason) == (3, "min_rtt_measured")


def test_gradient_formula(obs: ObsFactory) -> None:
    a = measured(0.02)
    # sampleRTT 0.03: gradient 0.025 / 0.03 = 0.833; 20 * 0.833 = 16.67 + sqrt(16.67) = 20.75.
    d = a.update(obs(limit=20, p90_e2e_per_token=0.03))
    g = 0.02 * 1.25 / 0.03
    assert d.limit == math.floor(20 * g + math.sqrt(20 * g)) == 20
    # sampleRTT 0.05: gradient 0.5; 10 + sqrt(10) = 13.16 -> 13, down from 20.
    assert a.update(obs(limit=20, p90_e2e_per_token=0.05)).limit == 13


@pytest.mark.parametrize(("rtt", "g"), [(0.001, 2.0), (1.0, 0.5)])
def test_gradient_is_clamped(obs: ObsFactory, rtt: float, g: float) -> None:
    d = measured(0.02).update(obs(limit=16, p90_e2e_per_token=rtt))
    assert d.limit == math.floor(16 * g + math.sqrt(16 * g))


def test_rtt_choice(obs: ObsFactory) -> None:
    a = create("gradient", {"rtt": "tpot", "min_rtt_interval": 0}, SLA())
    a.update(make_obs(limit=3, sample_count=8, p90={"tpot": 0.01}))
    # tpot 0.025 = 2 x (0.01 * 1.25): gradient 0.5.
    d = a.update(obs(limit=20, p90={"tpot": 0.025}, p90_e2e_per_token=0.0001))
    assert d.limit == math.floor(10 + math.sqrt(10))


def test_periodic_remeasure_restores_previous_limit() -> None:
    a = create("gradient", {"min_rtt_interval": 60}, SLA())
    a.update(make_obs(now=0.0, limit=3, sample_count=8, p90_e2e_per_token=0.02))
    d = a.update(make_obs(now=61.0, limit=24, p90_e2e_per_token=0.02))
    assert (d.limit, d.reason) == (3, "measuring_min_rtt")
    d = a.update(make_obs(now=70.0, limit=3, sample_count=8, p90_e2e_per_token=0.03))
    assert (d.limit, d.reason) == (24, "min_rtt_measured")


def test_remeasure_after_five_windows_at_minimum(obs: ObsFactory) -> None:
    a = measured(0.02)
    reasons = [a.update(obs(limit=3, p90_e2e_per_token=1.0)).reason for _ in range(6)]
    assert reasons == ["gradient"] * 5 + ["measuring_min_rtt"]


def test_insufficient_samples(obs: ObsFactory) -> None:
    d = measured().update(obs(limit=20, sample_count=2, p90_e2e_per_token=9.0))
    assert (d.limit, d.reason) == (20, "insufficient_samples")


def test_bad_rtt_choice() -> None:
    with pytest.raises(ValueError, match="'rtt'"):
        create("gradient", {"rtt": "latency"}, SLA())


def test_observation_default_has_no_per_token() -> None:
    assert Observation(1, 1, 1, 1, 0, 0, {}, {}, 0).p90_e2e_per_token is None
