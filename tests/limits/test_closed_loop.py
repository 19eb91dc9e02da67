"""The SLA controller in a closed loop against the simulated vLLM engine, in virtual time.

The engine model (gateway.sim, profile tiny-cpu) batches, fills a paged KV cache and preempts like
vLLM; the harness (loadtests/bench_algorithms.py) drives it through a real Limiter. Virtual time
makes these runs deterministic and fast, so the claims below are about behaviour, not timing.
"""

from __future__ import annotations

import pytest

from gateway.limits import create
from gateway.types import SLA
from loadtests.bench_algorithms import Run, phase_stats, simulate

TPOT = SLA(tpot_p90=0.008)


@pytest.fixture(scope="module")
def halving_run() -> Run:
    return simulate(
        create("sla", {}, TPOT), clients=48, duration=300.0, slowdowns=[(100.0, 2.0), (200.0, 1.0)]
    )


def test_overload_goodput_close_to_the_best_fixed_limit(halving_run: Run) -> None:
    adaptive = phase_stats(halving_run, 40.0, 100.0, TPOT)
    assert adaptive.worst_ratio <= 1.1
    best = 0.0
    for limit in (10, 12, 14):
        run = simulate(create("fixed", {"limit": limit}, TPOT), clients=48, duration=100.0)
        fixed = phase_stats(run, 40.0, 100.0, TPOT)
        if fixed.worst_ratio <= 1.0:
            best = max(best, fixed.tokens_per_s)
    assert best > 0
    assert adaptive.tokens_per_s >= 0.95 * best


def test_back_under_target_after_capacity_halves(halving_run: Run) -> None:
    halved = phase_stats(halving_run, 100.0, 200.0, TPOT)
    assert halved.converged_after is not None and halved.converged_after <= 30.0
    settled = phase_stats(halving_run, 130.0, 200.0, TPOT)
    assert settled.worst_ratio <= 1.1
    before = phase_stats(halving_run, 40.0, 100.0, TPOT).mean_limit
    assert settled.mean_limit < 0.6 * before


def test_limit_climbs_back_when_capacity_returns(halving_run: Run) -> None:
    before = phase_stats(halving_run, 40.0, 100.0, TPOT)
    after = phase_stats(halving_run, 250.0, 300.0, TPOT)
    assert after.mean_limit >= 0.85 * before.mean_limit
    assert after.worst_ratio <= 1.1


def test_preemptions_hold_the_limit_near_the_kv_knee() -> None:
    # A loose TTFT target never binds; KV pressure (the KV ceiling and the preemption rule) must
    # stop the limit from climbing regardless.
    sla = SLA(ttft_p90=5.0)
    run = simulate(create("sla", {}, sla), clients=48, duration=150.0)
    steady = phase_stats(run, 50.0, 150.0, sla)
    # 8,192 KV tokens / (232 + 300) tokens per request = 15.4: the knee is near there.
    assert 12 <= steady.mean_limit <= 18
    fixed24 = phase_stats(
        simulate(create("fixed", {"limit": 24}, sla), clients=48, duration=150.0), 50.0, 150.0, sla
    )
    assert steady.preemptions < fixed24.preemptions / 3
    assert steady.tokens_per_s >= 0.95 * fixed24.tokens_per_s
