"""The `goodput` controller's decision on hand-built observations: properties, not tick counts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from limits_helpers import engine_stats, make_obs

from gateway.control.algorithms import create
from gateway.control.algorithms.goodput.controller import GoodputLimit
from gateway.types import SLA, Observation

SLA_ = SLA(ttft_p90=1.0, tpot_p90=0.05)


def obs_with(limit: int, ttft: list[float], tpot: list[float], **kw: object) -> Observation:
    values = {"ttft": sorted(ttft), "tpot": sorted(tpot)}
    p90 = {s: v[int(0.9 * (len(v) - 1))] for s, v in values.items()}
    kw.setdefault("p50", {"e2e": 2.0})
    kw.setdefault("counts", {"e2e": 10, "ttft": len(ttft), "tpot": len(tpot)})
    kw.setdefault("since_change", 10.0)
    return make_obs(limit=limit, p90=p90, values=values, interval=1.0, **kw)


def test_it_is_registered_with_its_parameters_checked() -> None:
    assert isinstance(create("goodput", {"alpha": 0.01}, SLA_), GoodputLimit)
    try:
        create("goodput", {"alfa": 0.01}, SLA_)
    except ValueError as error:
        assert "alfa" in str(error)
    else:
        raise AssertionError("a misspelt parameter was accepted")


def test_a_clear_miss_cuts_at_most_by_beta_and_at_least_by_one() -> None:
    algo = GoodputLimit(SLA_)
    far = algo.update(obs_with(40, [5.0] * 30, [0.01] * 30))
    assert 20 <= far.limit < 40 and far.reason == "p90_over_target"
    near = GoodputLimit(SLA_).update(obs_with(40, [1.05] * 30, [0.01] * 30))
    assert 20 < near.limit < 40


def test_a_clear_meet_grows_by_at_most_the_slow_start_factor_a_turnover() -> None:
    # A turnover is the median e2e, 2 s here: the evidence of one grows the limit at most 2x, of
    # three (6 s) at most 8x.
    one = GoodputLimit(SLA_).update(obs_with(10, [0.01] * 40, [0.001] * 40, since_change=2.0))
    assert 10 < one.limit <= 20 and one.reason == "headroom"
    three = GoodputLimit(SLA_).update(obs_with(10, [0.01] * 40, [0.001] * 40, since_change=6.0))
    assert 20 < three.limit <= 80


def test_a_raise_aims_where_the_line_through_two_limits_meets_the_target() -> None:
    # TPOT 0.03 s at 10 and 0.035 s at 20: the line W = 0.025 + 0.0005 L meets 0.05 s at 50, far
    # past 20 / (0.035 / 0.05) = 28, where a line through the origin would aim.
    algo = GoodputLimit(SLA_)
    first = algo.update(obs_with(10, [0.01] * 40, [0.03] * 40, since_change=2.0))
    assert first.limit == 16  # one point: the line through the origin, 10 / 0.6
    second = algo.update(obs_with(20, [0.01] * 40, [0.035] * 40, since_change=20.0))
    assert 45 <= second.limit <= 50


def test_between_the_two_tests_the_limit_holds() -> None:
    # A tenth over: the P90 is at the target, and neither test may move the limit.
    d = GoodputLimit(SLA_).update(obs_with(10, [0.5] * 36 + [1.5] * 4, [0.01] * 40))
    assert d.limit == 10 and d.reason == "steady"


def test_counters_its_own_traffic_did_not_move_leave_the_limit_alone() -> None:
    # The limit held nothing back: a busy engine (others' traffic) and misses say nothing of it.
    stats = engine_stats(waiting=50.0, running=32.0, kv_usage=1.0)
    d = GoodputLimit(SLA_).update(obs_with(10, [5.0] * 30, [1.0] * 30, peak_inflight=3, engine_stats=stats))
    assert d.limit == 10 and d.reason == "not_binding"


def test_requests_the_engine_does_not_hold_do_not_count_against_its_kv_cache() -> None:
    # The KV cache holds 10 requests, and 5 of the 12 in flight wait in the front end: growth is free.
    seen = obs_with(12, [0.01] * 40, [0.001] * 40, kv_fits=10, outside_engine=5.0)
    assert GoodputLimit(SLA_).update(seen).reason == "headroom"
    blind = obs_with(12, [0.01] * 40, [0.001] * 40, kv_fits=10, outside_engine=0.0)
    assert GoodputLimit(SLA_).update(blind).reason != "headroom"


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 300),
    st.integers(1, 40),
    st.lists(st.floats(0.0, 10.0), min_size=1, max_size=60),
    st.lists(st.floats(0.0, 0.5), min_size=1, max_size=60),
    st.integers(0, 300),
)
def test_never_below_the_floor_nor_above_the_ceiling(
    limit: int, floor: int, ttft: list[float], tpot: list[float], peak: int
) -> None:
    algo = GoodputLimit(SLA_)
    limit = max(limit, floor)
    for now in range(5):
        d = algo.update(
            obs_with(limit, ttft, tpot, floor=floor, ceiling=300, peak_inflight=peak, now=100.0 + now)
        )
        assert floor <= d.limit <= 300
        limit = d.limit


def test_a_floor_is_proven_by_a_halving_within_the_run_of_cuts() -> None:
    # TPOT 2.5x the target at 12 and again at 6: cut in half and no lower, as when the engine
    # slows down just as the cuts begin. The 6 is compared with values read before the run, so it
    # proves nothing; a floor needs a halving from a limit read within the run (6 -> 3).
    algo = GoodputLimit(SLA_)
    over = [0.125] * 40

    def at(limit: int, now: float, tpot: list[float]) -> str:
        d = algo.update(obs_with(limit, [0.01] * 40, tpot, now=now, since_change=10.0))
        return f"{d.reason}@{d.limit}"

    assert at(12, 100.0, over) == "p90_over_target@6"
    assert at(6, 110.0, over) == "p90_over_target@3"
    # At 3 no lower than at 6: latency is not the limit's; back to where the cuts began.
    assert at(3, 120.0, over) == "sla_infeasible@12"


def test_a_burst_that_met_the_sla_takes_the_limit_to_its_size_and_never_cuts() -> None:
    # A fresh gateway's first burst: 40 requests in flight at once, the controller's limit at 8,
    # none of the epoch's own requests sent yet. What the burst measured bounds the latency of 40
    # in flight from above.
    def burst(ttft: list[float], tpot: list[float]) -> Observation:
        return make_obs(
            limit=8,
            p90={},
            values={},
            counts={},
            interval=1.0,
            since_change=1.0,
            peak_inflight=40,
            queued=30,
            bounds={"ttft": ttft, "tpot": tpot},
        )

    met = GoodputLimit(SLA_).update(burst([0.5] * 40, [0.02] * 40))
    assert met.limit == 40 and met.reason == "headroom"
    # Four of 40 not yet started (infinite: they count as misses): a tenth, not shown under.
    waiting = GoodputLimit(SLA_).update(burst([0.5] * 36 + [float("inf")] * 4, [0.02] * 40))
    assert waiting.limit == 8
    # Every one of them over target: an upper bound shows no miss, so the limit holds.
    slow = GoodputLimit(SLA_).update(burst([3.0] * 40, [0.2] * 40))
    assert slow.limit == 8
