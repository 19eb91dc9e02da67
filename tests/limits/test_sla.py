"""The SLA-setpoint controller as arithmetic on hand-built observations."""

from __future__ import annotations

import pytest
from limits_helpers import ObsFactory, signals

from gateway.limits import SLALimit, create
from gateway.limits.base import quantile_exceeds
from gateway.types import SLA, Direction

TTFT = SLA(ttft_p90=1.0)


def algo(**params: object) -> SLALimit:
    a = create("sla", params, TTFT)
    assert isinstance(a, SLALimit)
    return a


def test_decrease_is_proportional_to_overshoot(obs: ObsFactory) -> None:
    # 1.25x over target: limit 20 -> 20 / 1.25 = 16.
    d = algo().update(obs(limit=20, peak_inflight=20, p90={"ttft": 1.25}))
    assert (d.limit, d.direction, d.reason) == (16, Direction.DOWN, "p90_over_target")
    assert "1.25x" in d.detail
    # 1.6x over target: 20 / 1.6 = 12.5 -> 12. Twice as far over, cut more.
    d2 = algo().update(obs(limit=20, peak_inflight=20, p90={"ttft": 1.6}))
    assert d2.limit == 12


def test_decrease_never_below_half_per_tick(obs: ObsFactory) -> None:
    d = algo().update(obs(limit=24, p90={"ttft": 30.0}))
    assert d.limit == 12


def test_decrease_gain_and_bound_are_configurable(obs: ObsFactory) -> None:
    # gain 0.5, r = 2: factor 1 / (1 + 0.5) = 0.667; 30 * 0.667 = 20.
    d = algo(decrease_gain=0.5).update(obs(limit=30, p90={"ttft": 2.0}))
    assert d.limit == 20
    d = algo(max_decrease=0.2).update(obs(limit=30, p90={"ttft": 5.0}))
    assert d.limit == 24


def test_slight_overshoot_still_moves_one_step(obs: ObsFactory) -> None:
    # 10 / 1.01 = 9.9 would round back to 10 without the one-step rule.
    d = algo().update(obs(limit=10, p90={"ttft": 1.01}))
    assert d.limit == 9


def test_worst_signal_decides(obs: ObsFactory) -> None:
    sla = SLA(ttft_p90=1.0, tpot_p90=0.1, e2e_p90=30.0)
    a = create("sla", {}, sla)
    # ttft 0.5x, tpot 2x, e2e 0.1x: the tpot overshoot halves the limit.
    d = a.update(obs(limit=20, p90={"ttft": 0.5, "tpot": 0.2, "e2e": 3.0}))
    assert d.limit == 10 and "tpot" in d.detail


def test_signals_without_target_are_ignored(obs: ObsFactory) -> None:
    d = algo().update(obs(limit=10, p90={"ttft": 0.2, "e2e": 99.0}))
    assert d.direction == Direction.UP


def test_increase_only_while_binding(obs: ObsFactory) -> None:
    binding = algo().update(obs(limit=10, peak_inflight=10, p90={"ttft": 0.85}))
    assert (binding.limit, binding.reason) == (11, "headroom")
    queued = algo().update(obs(limit=10, peak_inflight=4, queued=3, p90={"ttft": 0.85}))
    assert queued.limit == 11
    idle = algo().update(obs(limit=10, peak_inflight=9, queued=0, p90={"ttft": 0.1}))
    assert (idle.limit, idle.direction, idle.reason) == (10, Direction.HOLD, "not_binding")


def test_slow_start_doubles_under_target_until_the_first_decrease(obs: ObsFactory) -> None:
    a = algo()
    # r = 0.3 and 0.6 < 0.7, never congested: double.
    assert a.update(obs(now=0.0, limit=8, peak_inflight=8, p90={"ttft": 0.3})).limit == 16
    assert a.update(obs(now=1.0, limit=16, peak_inflight=16, p90={"ttft": 0.6})).limit == 32
    # r = 0.8 is past slow start: the proportional step, 16 x (0.9 / 0.8 - 1) = 2.
    assert algo().update(obs(limit=16, peak_inflight=16, p90={"ttft": 0.8})).limit == 18
    # Once congested, no more doubling: far under target climbs by at most ceil(sqrt(L)).
    assert a.update(obs(now=2.0, limit=32, p90={"ttft": 2.0})).direction == Direction.DOWN
    assert a.update(obs(now=3.0, limit=16, peak_inflight=16, p90={"ttft": 0.3})).limit == 20


def test_dead_band_holds(obs: ObsFactory) -> None:
    for r in (0.9, 0.95, 1.0):
        d = algo().update(obs(limit=10, p90={"ttft": r}))
        assert (d.limit, d.reason) == (10, "steady"), r


def test_insufficient_samples_hold_even_over_target(obs: ObsFactory) -> None:
    d = algo().update(obs(limit=10, sample_count=7, min_samples=8, p90={"ttft": 5.0}, preemptions_delta=3))
    assert (d.limit, d.direction, d.reason) == (10, Direction.HOLD, "insufficient_samples")
    assert "7 of 8" in d.detail and "preemptions" in d.detail


def test_preemptions_back_off_even_under_target(obs: ObsFactory) -> None:
    d = algo().update(obs(limit=20, p90={"ttft": 0.1}, preemptions_delta=4))
    # 20 * 0.85 = 17.
    assert (d.limit, d.reason) == (17, "preemptions")


def test_rare_preemptions_are_tolerated(obs: ObsFactory) -> None:
    # Six preemptions per 20 finished requests are within the 0.3 tolerance; seven are over.
    calm = algo().update(obs(limit=20, p90={"ttft": 0.7}, preemptions_delta=6, completed=20))
    assert calm.direction == Direction.UP
    d = algo().update(obs(limit=20, p90={"ttft": 0.7}, preemptions_delta=7, completed=20))
    assert d.reason == "preemptions"
    strict = algo(preemption_tolerance=0)
    d = strict.update(obs(limit=20, p90={"ttft": 0.7}, preemptions_delta=1, completed=20))
    assert d.reason == "preemptions"


@pytest.mark.parametrize(
    ("limit", "ratio", "step"),
    [
        (10, 0.85, 1),  # 10 x (0.9 / 0.85 - 1) = 0.59: at least increase_step
        (20, 0.8, 2),  # 20 x 0.125 = 2.5, under ceil(sqrt(20)) = 5
        (20, 0.3, 5),  # 20 x 2 = 40: capped by ceil(sqrt(20))
        (100, 0.8, 10),  # 100 x 0.125 = 12.5: capped by sqrt(100)
    ],
)
def test_headroom_step_is_proportional_and_capped(
    obs: ObsFactory, limit: int, ratio: float, step: int
) -> None:
    a = algo()
    assert a.update(obs(limit=limit * 2, ceiling=256, p90={"ttft": 2.0})).direction == Direction.DOWN
    d = a.update(obs(limit=limit, ceiling=256, p90={"ttft": ratio}))
    assert (d.limit, d.reason) == (limit + step, "headroom")


def test_kv_saturated_with_backend_queueing(obs: ObsFactory) -> None:
    s = signals(kv_usage=0.98, waiting=5, running=14)
    d = algo().update(obs(limit=20, p90={"ttft": 0.5}, signals=s))
    assert (d.limit, d.reason) == (18, "kv_saturated")


def test_kv_high_without_queueing_blocks_increase_only(obs: ObsFactory) -> None:
    s = signals(kv_usage=0.97, waiting=0, running=20)
    d = algo().update(obs(limit=20, p90={"ttft": 0.5}, signals=s))
    assert (d.limit, d.direction, d.reason) == (20, Direction.HOLD, "kv_saturated")


def test_backend_queueing_lowers_to_running(obs: ObsFactory) -> None:
    # vLLM runs 12 (max_num_seqs) and queues 8 of ours, scrape after scrape: keep them in our queue.
    a = algo()
    first = a.update(
        obs(limit=20, p90={"ttft": 0.5}, signals=signals(at=98.0, kv_usage=0.5, waiting=8, running=12))
    )
    assert first.reason == "headroom"  # one scrape could be requests just sent, not yet admitted
    s = signals(at=99.0, kv_usage=0.5, waiting=8, running=12)
    d = a.update(obs(limit=20, p90={"ttft": 0.5}, signals=s))
    assert (d.limit, d.reason) == (13, "backend_queueing")
    assert d.detail == "backend queues 8 requests with 12 running, two scrapes in a row"
    # The same scrape seen again by a later tick is not a second scrape.
    b = algo()
    for _ in range(2):
        assert b.update(obs(limit=20, p90={"ttft": 0.5}, signals=s)).reason == "headroom"
    # One request caught waiting between engine steps is tolerated, however long.
    c = algo()
    for at in (97.0, 98.0, 99.0):
        s1 = signals(at=at, kv_usage=0.5, waiting=1, running=12)
        assert c.update(obs(limit=20, p90={"ttft": 0.5}, signals=s1)).reason == "headroom"


def test_clamped_to_floor_and_ceiling(obs: ObsFactory) -> None:
    d = algo().update(obs(limit=3, floor=3, p90={"ttft": 4.0}))
    assert (d.limit, d.direction, d.reason) == (3, Direction.HOLD, "p90_over_target")
    d = algo().update(obs(limit=16, ceiling=16, p90={"ttft": 0.1}))
    assert (d.limit, d.reason) == (16, "at_ceiling")
    d = algo().update(obs(limit=15, ceiling=16, p90={"ttft": 0.1}))
    assert d.limit == 16  # sqrt step 4 clipped by the ceiling


def test_ceiling_below_limit_forces_down(obs: ObsFactory) -> None:
    d = algo().update(obs(limit=20, ceiling=15, p90={"ttft": 0.9}))
    assert (d.limit, d.direction, d.reason) == (15, Direction.DOWN, "above_ceiling")


def test_no_sla_targets_grows_until_backend_pushes_back(obs: ObsFactory) -> None:
    a = create("sla", {}, SLA())
    assert a.update(obs(limit=10)).direction == Direction.UP
    d = a.update(obs(limit=10, preemptions_delta=1))
    assert d.direction == Direction.DOWN


def test_initial_limit() -> None:
    assert algo().initial_limit(1, 256) == 8
    assert algo(initial=40).initial_limit(1, 16) == 16


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"increase_below": 1.5}, "increase_below"),
        ({"max_decrease": 0}, "max_decrease"),
        ({"initial": "8"}, "initial"),
        ({"initial": True}, "initial"),
        ({"kv_high_water": 0}, "kv_high_water"),
        ({"speed": 2}, "speed"),
    ],
)
def test_bad_params_name_the_key(params: dict[str, object], key: str) -> None:
    with pytest.raises(ValueError, match=repr(key)):
        create("sla", params, TTFT)


def test_band_order_is_validated() -> None:
    with pytest.raises(ValueError, match="slow_start_below"):
        create("sla", {"increase_below": 0.4, "slow_start_below": 0.6}, TTFT)


def test_a_decrease_needs_min_samples_of_its_own_signal(obs: ObsFactory) -> None:
    # TTFT has 50 samples; TPOT only the 3 quickest requests of the epoch (2x over target).
    both = SLA(ttft_p90=1.0, tpot_p90=0.03)
    a = SLALimit(both)
    thin = obs(limit=20, p90={"ttft": 0.5, "tpot": 0.06}, counts={"ttft": 50, "tpot": 3}, min_samples=20)
    d = a.update(thin)
    # Too few to cut on, but the cautious reading still blocks an increase, and says why.
    assert (d.limit, d.direction, d.reason) == (20, Direction.HOLD, "insufficient_samples")
    assert d.detail == "tpot P90 is 2.00x its target on 3 of 20 values since the last change"
    enough = obs(limit=20, p90={"ttft": 0.5, "tpot": 0.06}, counts={"ttft": 50, "tpot": 20}, min_samples=20)
    d = a.update(enough)
    assert (d.limit, d.reason) == (10, "p90_over_target") and d.detail.startswith("tpot")


def test_a_few_values_mostly_over_target_are_enough_to_cut(obs: ObsFactory) -> None:
    """Below min_samples, a cut needs so many values over the target that a P90 at the target
    would rarely give them: 3 of 5 yes, 1 of 5 (one stalled request) no."""
    a = SLALimit(SLA(tpot_p90=0.03))
    few = {"tpot": [0.02, 0.025, 0.05, 0.05, 0.06]}
    d = a.update(
        obs(limit=20, p90={"tpot": 0.06}, values=few, counts={"tpot": 5}, sample_count=5, min_samples=20)
    )
    assert (d.limit, d.reason) == (10, "p90_over_target")
    assert d.detail == "tpot P90 0.060s is 2.00x its target 0.03s on 5 values: 20 x 0.50"
    one = {"tpot": [0.02, 0.02, 0.025, 0.025, 0.5]}
    d = a.update(
        obs(limit=20, p90={"tpot": 0.5}, values=one, counts={"tpot": 5}, sample_count=5, min_samples=20)
    )
    assert (d.direction, d.reason) == (Direction.HOLD, "insufficient_samples")


@pytest.mark.parametrize(("n", "needed"), [(3, 3), (5, 3), (8, 4), (12, 5), (20, 7)])
def test_quantile_evidence_thresholds(n: int, needed: int) -> None:
    def values(over: int) -> list[float]:
        return [0.0] * (n - over) + [2.0] * over

    assert quantile_exceeds(values(needed), 1.0, 0.9, 0.01)
    assert not quantile_exceeds(values(needed - 1), 1.0, 0.9, 0.01)
