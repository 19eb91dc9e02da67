"""The SLA controller as arithmetic on hand-built observations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from limits_helpers import ObsFactory, engine_stats

from gateway.control.algorithms import SLALimit, create
from gateway.control.algorithms.sla.params import SLAParams
from gateway.control.algorithms.sla.steps import rise_room
from gateway.types import SLA, Decision, Direction, Observation

TTFT = SLA(ttft_p90=1.0)


def algo(**params: object) -> SLALimit:
    a = create("sla", params, TTFT)
    assert isinstance(a, SLALimit)
    return a


def measured(obs: ObsFactory, limit: int, ratio: float, now: float, tokens: float = 1000.0) -> Observation:
    """A binding tick at `limit`, long enough after the change to count, with TTFT P90 = ratio."""
    return obs(
        limit=limit, p90={"ttft": ratio}, now=now, interval=1.0, since_change=10.0, delivered_tokens=tokens
    )


def test_first_cut_assumes_latency_proportional_to_the_limit(obs: ObsFactory) -> None:
    d = algo().update(measured(obs, 20, 1.25, 100.0))
    assert (d.limit, d.direction, d.reason) == (16, Direction.DOWN, "p90_over_target")
    assert algo().update(measured(obs, 24, 30.0, 100.0)).limit == 12  # never more than halved
    assert algo().update(measured(obs, 10, 1.01, 100.0)).limit == 9  # always at least one step


def test_cut_follows_the_secant_through_a_measured_lower_limit(obs: ObsFactory) -> None:
    a = algo()
    a.update(measured(obs, 10, 0.5, 100.0))
    # r = 0.5 at 10 and 2.0 at 16: r = 1 at 16 - (2 - 1) x 6 / 1.5 = 12.
    d = a.update(measured(obs, 16, 2.0, 101.0))
    assert (d.limit, d.reason) == (12, "p90_over_target") and "between 10" in d.detail


def test_a_secant_steeper_than_four_times_proportional_is_not_followed(obs: ObsFactory) -> None:
    a = algo()
    a.update(measured(obs, 12, 0.86, 100.0))
    # 13 reads 1.94x a step above 12 at 0.86x: a slope of 1.08 a step against 1.94 / 13 = 0.15 if
    # latency grew with the limit. The backend changed between the readings (capacity halved
    # while 13 was probed): not the secant's 12, but 13 / 1.94.
    d = a.update(measured(obs, 13, 1.94, 101.0))
    assert d.limit == 6 and "13 / 1.94" in d.detail


def test_latency_that_cuts_do_not_lower_is_reported_as_a_floor(obs: ObsFactory) -> None:
    a = algo()
    for t in range(5):
        a.update(measured(obs, 16, 0.95, 90.0 + t, tokens=2000.0))  # the most throughput
    a.update(measured(obs, 16, 1.5, 96.0, tokens=2000.0))
    # Halving the limit left P90 at 1.45x: a line through (8, 1.45) and (16, 1.5) is over 1 at 1.
    # It is a floor once 8 has been measured for `floor_dwell` (4 s), held meanwhile.
    held = [a.update(measured(obs, 8, 1.45, 100.0 + t, tokens=1000.0)) for t in range(4)]
    assert [(d.reason, d.limit) for d in held[:3]] == [("insufficient_samples", 8)] * 3
    d = held[-1]
    assert d.sla_infeasible and d.latency_floor == {"ttft": 1.45}
    assert (d.reason, d.limit) == ("sla_infeasible", 16)


def test_a_slowdown_that_passes_within_the_dwell_proves_no_floor(obs: ObsFactory) -> None:
    # A cold start: 16 and then 8 over target alike for two seconds, then 8 meets it. No floor is
    # declared (it would hold the limit at what the KV cache holds for two minutes) and the
    # limit is not cut further while the floor is in doubt.
    a = algo()
    a.update(measured(obs, 16, 1.5, 96.0))
    doubt = [a.update(measured(obs, 8, 1.45, 100.0 + t)) for t in range(2)]
    assert [(d.reason, d.limit) for d in doubt] == [("insufficient_samples", 8)] * 2
    d = a.update(measured(obs, 8, 0.6, 102.0))
    assert not d.sla_infeasible and d.latency_floor is None
    later = [a.update(measured(obs, 8, 0.6, 103.0 + t)) for t in range(5)]
    assert not any(d.sla_infeasible for d in later)


def test_a_stall_of_one_signal_hides_no_floor_of_another(obs: ObsFactory) -> None:
    # A front end's stall put TTFT at 50x its target at 4, TPOT 4x; at 2, once it passed, TTFT read
    # 1.8x and TPOT 3.3x. Through the worst ratios latency falls steeply with the limit; TPOT's own
    # line stays over its target down to the floor limit: a floor, proven at 2 after the dwell.
    a = create("sla", {}, SLA(ttft_p90=0.05, tpot_p90=0.002))

    def tick(limit: int, ttft: float, tpot: float, now: float) -> Decision:
        p90 = {"ttft": ttft, "tpot": tpot}
        return a.update(
            obs(limit=limit, p90=p90, now=now, interval=1.0, since_change=10.0, delivered_tokens=1000.0)
        )

    tick(4, 2.5, 0.008, 96.0)
    held = [tick(2, 0.09, 0.0066, 100.0 + t) for t in range(4)]
    assert [(d.reason, d.limit) for d in held[:3]] == [("insufficient_samples", 2)] * 3
    assert held[-1].sla_infeasible and held[-1].latency_floor == {"tpot": 0.0066}


def outside(obs: ObsFactory, now: float, limit: int = 12, **kw: object) -> Observation:
    """TTFT 1.3 s at the proxy, 0.05 s in the engine's own histogram: 1.25 s spent outside it."""
    stats = engine_stats(at=now - 0.5, ttft_p90=0.05)
    return obs(limit=limit, p90={"ttft": 1.3}, now=now, interval=1.0, engine_stats=stats, **kw)


def until_infeasible(a: SLALimit, obs: ObsFactory, start: float, **kw: object) -> tuple[Decision, list[int]]:
    """Ticks of `outside` from limit 12, each at the limit last decided, until sla_infeasible."""
    limit, changed, seen = 12, start - 10.0, [12]
    for i in range(60):
        now = start + i
        d = a.update(outside(obs, now, limit, since_change=now - changed, **kw))
        if d.sla_infeasible:
            return d, seen
        if d.limit != limit:
            limit, changed = d.limit, now
            seen.append(limit)
    raise AssertionError(f"never infeasible; limits {seen}")


def test_front_end_delay_that_a_cut_to_half_leaves_is_a_floor(obs: ObsFactory) -> None:
    # The delay may be of the gateway's own making (a front end queueing what it lets in): it is a
    # floor only once a limit at most half as high, settled, shows it too. Where no limit twice as
    # high was measured there is nothing to wait for: the first tick cuts.
    first = algo().update(outside(obs, 100.0, since_change=10.0))
    assert (first.limit, first.reason) == (9, "p90_over_target")
    d, seen = until_infeasible(algo(), obs, 100.0)
    assert d.latency_floor == pytest.approx({"ttft": 1.25})
    assert min(seen) == 6 and seen == sorted(seen, reverse=True)


def test_front_end_delay_that_a_cut_removes_is_no_floor(obs: ObsFactory) -> None:
    a = algo()
    d = a.update(outside(obs, 100.0, since_change=10.0))
    t = 100.0
    while d.limit == 12:
        t += 1.0
        d = a.update(outside(obs, t, since_change=10.0 + t - 100.0))
    assert d.reason == "p90_over_target" and not d.sla_infeasible
    lower, changed = d.limit, t
    for _ in range(10):
        t += 1.0
        met = engine_stats(at=t - 0.5, ttft_p90=0.05)
        d = a.update(
            obs(
                limit=lower,
                p90={"ttft": 0.6},
                now=t,
                interval=1.0,
                engine_stats=met,
                since_change=t - changed,
            )
        )
        assert not d.sla_infeasible


def test_a_met_target_clears_the_floor(obs: ObsFactory) -> None:
    a = algo()
    d, seen = until_infeasible(a, obs, 100.0)
    n = seen[-1]
    assert a.update(
        obs(limit=n, p90={"ttft": 1.3}, now=200.0, interval=1.0, sample_count=2, counts={"ttft": 2})
    ).sla_infeasible
    # Met right after a change: the requests behind it still ran beside the earlier ones.
    assert a.update(obs(limit=n, p90={"ttft": 0.95}, now=201.0, interval=1.0)).sla_infeasible
    d = a.update(obs(limit=n, p90={"ttft": 0.95}, now=202.0, interval=1.0, since_change=10.0))
    assert not d.sla_infeasible


def test_not_binding_never_moves_whatever_latency_or_counters_say(obs: ObsFactory) -> None:
    d = algo().update(obs(limit=8, peak_inflight=0, p90={"ttft": 5.0}, preemptions_delta=40.0))
    assert (d.direction, d.reason) == (Direction.HOLD, "not_binding")


def test_an_idle_limit_holds_however_long_it_idles(obs: ObsFactory) -> None:
    # 25 was kept under steady load; a pause of any length leaves it for the next burst (what a
    # burst may take is the limiter's), and so does a load steady below it.
    a = algo()
    a.update(obs(limit=25, p90={"ttft": 0.5}, now=100.0, kv_fits_whole=15))
    for t in (101.0, 102.0, 110.0, 400.0):
        d = a.update(obs(limit=25, peak_inflight=3, p90={"ttft": 5.0}, now=t, kv_fits_whole=15))
        assert (d.limit, d.direction, d.reason) == (25, Direction.HOLD, "not_binding")


def test_preemptions_and_full_kv_are_not_reasons_to_cut(obs: ObsFactory) -> None:
    stats = engine_stats(kv_usage=1.0, waiting=6.0, running=14.0)
    d = algo().update(
        obs(limit=14, p90={"ttft": 0.5}, engine_stats=stats, preemptions_delta=6.0, since_change=10.0)
    )
    assert d.direction == Direction.UP


def test_growth_toward_the_band_capped_by_sqrt_and_by_a_limit_known_over(obs: ObsFactory) -> None:
    # r = 0.45 at 16: proportional room 16 x (0.9 / 0.45 - 1) = 16, capped at sqrt(16) = 4.
    a = algo()
    assert a.update(measured(obs, 16, 0.45, 100.0)).limit == 20
    a.update(measured(obs, 19, 0.95, 110.0))
    # 19 was measured at the band: from 16, grow to 18 at most.
    assert a.update(measured(obs, 16, 0.45, 120.0)).limit == 18


def test_growth_below_what_the_kv_cache_holds_goes_as_far_as_room_allows(obs: ObsFactory) -> None:
    def step(limit: int, ratio: float, fits: int, whole: int | None = 100) -> int:
        tick = measured(obs, limit, ratio, 100.0)
        return algo().update(replace(tick, kv_fits=fits, kv_fits_whole=whole)).limit - limit

    # r = 0.25 at 8: room 8 x ((0.9 / 0.25)^2 - 1) = 95, at most what the KV cache holds.
    assert step(8, 0.25, 16) == 8  # to what the KV cache holds at once
    assert step(8, 0.25, 40) == 32
    assert step(8, 0.25, 40, whole=20) == 12  # or holds with every request whole, where fewer
    assert step(8, 0.25, 40, whole=None) == 8  # that unknown: a doubling at most
    assert step(8, 0.75, 16) == 3  # room 8 x ((0.9 / 0.75)^2 - 1) = 3.5
    assert step(8, 0.75, 10) == 2  # no further than what the KV cache holds
    assert step(20, 0.25, 16) == 2  # past what it holds a raise is a probe: 10% of 20
    assert step(10, 0.25, 12) == 2  # sqrt(10) would pass what it holds: growth stops there


def test_room_grows_latency_as_the_square_root_of_the_limit_within_the_kv_cache() -> None:
    # Within what the KV cache holds: P90 x sqrt((L + room) / L) reaches u at room = L ((u / r)^2 - 1).
    assert rise_room(8, 0.75, 0.9, 20) == 3  # 8 x 0.44 = 3.5
    assert rise_room(8, 0.75, 0.9, 10) == 2  # not past what it holds, 10
    # Past it, or with it unknown, in proportion: L (u / r - 1).
    assert rise_room(8, 0.75, 0.9, None) == 1  # 8 x 0.2 = 1.6
    assert rise_room(20, 0.45, 0.9, 16) == 20
    # Where proportional room reaches further than what the KV cache holds, that stands.
    assert rise_room(10, 0.3, 0.9, 12) == 20
    assert rise_room(10, 0.0, 0.9, 12) == 10  # nothing measured over zero: one doubling


def test_growth_near_a_knee_stops_at_what_the_kv_cache_holds(obs: ObsFactory) -> None:
    a = algo()
    a.update(replace(measured(obs, 30, 0.95, 100.0), kv_fits=21))  # 30 measured at the band
    # Near the knee one step is 10% of 20 = 2; it stops at 21, from where a raise is judged.
    assert a.update(replace(measured(obs, 20, 0.5, 110.0), kv_fits=21)).limit == 21


def past_the_kv_cache(a: SLALimit, obs: ObsFactory, tokens_at_22: float) -> list[Decision]:
    """A limit at what the KV cache holds (20) delivering 1,000 tokens/s raises (to 22 by default,
    one step of 10%), which then delivers `tokens_at_22` a second; the decisions taken there, a tick
    a second."""
    fits = {"kv_fits": 20, "p90": {"ttft": 0.3}, "interval": 1.0}
    for t in range(6):
        few = {"counts": {"ttft": 3}} if t < 5 else {}  # 20 measured for 5 s before it may grow
        d = a.update(
            obs(limit=20, now=100.0 + t, since_change=10.0 + t, delivered_tokens=1000.0, **fits, **few)
        )
    assert d.reason == "probe" and d.limit > 20
    return [
        a.update(obs(limit=d.limit, now=106.0 + t, since_change=t, delivered_tokens=tokens_at_22, **fits))
        for t in range(1, 30)
    ]


def test_past_what_the_kv_cache_holds_a_raise_is_kept_only_on_a_measured_gain(obs: ObsFactory) -> None:
    flat = past_the_kv_cache(algo(), obs, 1000.0)
    moved = next(d for d in flat if d.limit != 22)
    assert (moved.limit, moved.reason) == (20, "no_gain")
    assert all(d.reason == "probing" for d in flat[: flat.index(moved)])
    gained = past_the_kv_cache(algo(), obs, 1200.0)
    kept = next(d for d in gained if d.reason != "probing")
    assert (kept.limit, kept.reason) == (22, "probe")
    # Kept: the next raise comes once the P90s stand on values from after this one.
    assert max(d.limit for d in gained) > 22


def test_from_what_the_kv_cache_holds_whole_a_raise_is_one_step_judged_on_its_gain(obs: ObsFactory) -> None:
    # The young requests running say 24 fit; at their full size 18 do. Past 18 they preempt one
    # another as they grow (a 14% lower rate at 20 than at 18 on the real engine), so growth stops
    # at 18, and a raise from there is one step, kept only on a measured gain.
    whole = {"kv_fits": 24, "kv_fits_whole": 18}
    to_whole = algo().update(replace(measured(obs, 10, 0.3, 100.0), **whole))
    assert (to_whole.limit, to_whole.reason) == (18, "probe")
    a = algo()
    d = a.update(replace(measured(obs, 18, 0.3, 100.0), **whole))
    assert (d.limit, d.reason) == (20, "probe") and "kept on a measured gain" in d.detail
    assert a.update(replace(measured(obs, 20, 0.3, 101.0), **whole)).reason == "probing"


def test_requests_the_engine_does_not_hold_move_where_raises_are_judged(obs: ObsFactory) -> None:
    # 14 fit whole, and 4 of the requests in flight at 14 wait in the front end, outside the engine
    # and its KV cache: raises are judged from 18, and 14 grows toward the band as far as that.
    stats = engine_stats(running=10.0, waiting=0.0)
    a = algo()
    for t in range(6):
        tick = measured(obs, 14, 0.3, 100.0 + t)
        d = a.update(replace(tick, kv_fits=24, kv_fits_whole=14, engine_stats=stats, outside_engine=4.0))
    assert (d.limit, d.reason) == (18, "probe") and "kept on a measured gain" not in d.detail


def missing(obs: ObsFactory, limit: int, t: int, ratio: float, tokens: float, missed: float) -> Observation:
    """A tick at 100 + t s, `since_change` t, TTFT P90 `ratio`, `tokens` streamed, all of them
    answered by 5 requests, `missed` of them in answers that missed a target."""
    return obs(
        limit=limit,
        p90={"ttft": ratio},
        now=100.0 + t,
        interval=1.0,
        since_change=float(t),
        delivered_tokens=tokens,
        finished=5,
        answered_tokens=tokens,
        missed_tokens=missed,
    )


@pytest.mark.parametrize(("tokens_at_18", "ends"), [(950.0, (18, "probe")), (300.0, (20, "no_gain"))])
def test_where_much_of_the_output_missed_a_target_a_lower_limit_is_tried(
    obs: ObsFactory, tokens_at_18: float, ends: tuple[int, str]
) -> None:
    # At 20 the TTFT P90 reads 0.95x its target, but 40% of the output came in answers that missed
    # it (the longest answers miss first; of about 25 answers, a share that varies by 0.1): 600
    # good tokens/s. 18 is tried; it stays where it delivered as much goodput (950, none missed),
    # and goes back where it delivered clearly less.
    a = algo()
    for t in range(10, 16):
        d = a.update(missing(obs, 20, t, 0.95, 1000.0, 400.0))
    assert (d.limit, d.reason) == (18, "probe") and "40% of the output missed a target" in d.detail
    at_18 = [a.update(missing(obs, 18, 16 + t, 0.95, tokens_at_18, 0.0)) for t in range(30)]
    decided = next(d for d in at_18 if d.reason != "probing")
    assert (decided.limit, decided.reason) == ends and "good tok/s" in decided.detail


def test_a_share_missed_within_its_noise_tries_no_lower_limit_until_the_answers_make_it_clear(
    obs: ObsFactory,
) -> None:
    # A quarter of the output missed, 5 answers a second: 0.75 met, whose standard deviation over
    # n answers is sqrt(0.75 x 0.25 / n). Under 2 of them from 0.9 (n > 33) only from 18 s on.
    a = algo()
    early = [a.update(missing(obs, 20, t, 0.95, 1000.0, 250.0)) for t in range(10, 18)]
    assert all(d.limit == 20 for d in early)
    d = a.update(missing(obs, 20, 18, 0.95, 1000.0, 250.0))
    assert (d.limit, d.reason) == (18, "probe") and "25% of the output missed a target" in d.detail


def test_a_raise_to_where_much_of_the_output_missed_a_target_is_judged_on_goodput(obs: ObsFactory) -> None:
    # 20 delivered 750 good tokens/s of 1,000; 18 and 19 meet the target with room and miss
    # nothing: growth goes on, but the raise back to 20 stands only if it gains.
    a = algo()
    for t in range(10, 16):
        a.update(missing(obs, 20, t, 0.95, 1000.0, 250.0))
    limit, since = 18, 0
    for t in range(16, 60):
        d = a.update(replace(missing(obs, limit, t, 0.5, 950.0, 0.0), since_change=10.0 + since))
        limit, since = d.limit, 0 if d.limit != limit else since + 1
        if limit >= 20:
            break
    assert (d.limit, d.reason) == (20, "probe")
    assert "to where the output missed targets: kept on a measured gain" in d.detail


def test_a_judged_raise_that_gained_in_proportion_doubles_the_next(obs: ObsFactory) -> None:
    # 20 -> 22 delivered 1,200 tokens/s against 1,000: 20% for 10% more, so the next raise is 4.
    gained = past_the_kv_cache(algo(), obs, 1200.0)
    kept = next(i for i, d in enumerate(gained) if d.reason != "probing")
    raised = next(d for d in gained[kept:] if d.limit != 22)
    assert raised.limit == 26


def test_judged_past_kv_set_high_grows_on_latency_room_alone(obs: ObsFactory) -> None:
    flat = past_the_kv_cache(algo(judged_past_kv=1000.0), obs, 1000.0)
    assert all(d.reason != "no_gain" for d in flat) and min(d.limit for d in flat) == 25  # sqrt(20)


def test_growth_waits_for_evidence_at_the_current_limit(obs: ObsFactory) -> None:
    few = obs(limit=10, p90={"ttft": 0.2}, sample_count=3, counts={"ttft": 3}, since_change=10.0)
    assert algo().update(few).direction == Direction.HOLD
    early = obs(limit=10, p90={"ttft": 0.2}, since_change=0.5)
    assert algo().update(early).direction == Direction.HOLD


def test_whole_answers_far_under_target_grow_on_a_complete_cohort(obs: ObsFactory) -> None:
    """At 8, 8 of 20 answers are in, every one sent before the oldest still running: their P90 at
    0.2 of the target grows the limit to what the KV cache holds with every request at its full
    size (16), not to what the young requests running suggest (20); the same values without the
    cohort wait for 20."""
    a = create("sla", {}, SLA(e2e_p90=10.0))
    few = obs(
        limit=8,
        p90={"e2e": 2.0},
        counts={"e2e": 8},
        min_samples=20,
        since_change=10.0,
        kv_fits=20,
        kv_fits_whole=16,
    )
    assert a.update(few).direction == Direction.HOLD
    d = a.update(replace(few, now=101.0, since_change=11.0, cohorts={"e2e": [1.0] * 7 + [2.0]}))
    assert (d.reason, d.limit) == ("probe", 16) and "0.20" in d.detail


def test_a_lower_limit_that_delivered_clearly_more_pulls_the_limit_down_to_it(obs: ObsFactory) -> None:
    a = algo()
    for t in range(5):
        a.update(measured(obs, 14, 0.95, 100.0 + t, tokens=1000.0))
    for t in range(5):
        d = a.update(measured(obs, 20, 0.95, 105.0 + t, tokens=800.0))
    assert (d.reason, d.limit) == ("throughput_falls", 14)


def test_a_lower_limit_that_delivered_clearly_more_goodput_pulls_the_limit_down(obs: ObsFactory) -> None:
    # 20 streamed more tokens than 14, but half of them in answers that missed a target.
    a = algo()
    for t in range(10, 16):
        a.update(missing(obs, 14, t, 0.5, 1000.0, 0.0))
    for t in range(16, 22):
        d = a.update(replace(missing(obs, 20, t, 0.95, 1200.0, 600.0), since_change=10.0 + t))
    assert (d.reason, d.limit) == ("throughput_falls", 14) and "20 600 good tok/s" in d.detail


def test_a_cut_starts_from_the_requests_in_flight_when_fewer_than_the_limit(obs: ObsFactory) -> None:
    # One queued request makes a limit of 14 binding while 8 run: the P90 is of 8 in flight.
    tick = obs(limit=14, peak_inflight=8, queued=1, p90={"ttft": 2.0}, since_change=10.0)
    d = algo().update(replace(tick, values={"ttft": [2.0] * 20}, counts={"ttft": 20}))
    assert (d.reason, d.limit) == ("p90_over_target", 4)  # 8 / 2.0, not 14 / 2.0


def test_over_target_on_too_few_values_holds(obs: ObsFactory) -> None:
    # 1 of 2 values over: could be one stalled request.
    d = algo().update(
        obs(limit=10, p90={"ttft": 1.5}, sample_count=2, counts={"ttft": 2}, values={"ttft": [0.3, 1.5]})
    )
    assert (d.direction, d.reason) == (Direction.HOLD, "insufficient_samples")


@pytest.mark.parametrize(("slow", "direction"), [(3, Direction.HOLD), (7, Direction.DOWN)])
def test_a_p90_over_target_cuts_only_when_its_values_show_it(
    obs: ObsFactory, slow: int, direction: Direction
) -> None:
    # A true P90 at the target puts 2 of 20 values over it on average, and 3 or more about a third
    # of the time: a sampling wobble, not a limit too high. 7 of 20 happens by chance under 1%.
    values = sorted([0.8] * (20 - slow) + [1.2] * slow)
    d = algo().update(
        obs(limit=10, p90={"ttft": 1.2}, counts={"ttft": 20}, values={"ttft": values}, min_samples=20)
    )
    assert d.direction is direction


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"increase_below": 0.0}, "increase_below"),
        ({"floor_span": 0.5}, "floor_span"),
        ({"half_life": 100.0}, "half_life"),
        ({"probe_dwell": 0.0}, "probe_dwell"),
        ({"nope": 1}, "unknown parameter 'nope'"),
    ],
)
def test_parameters_are_validated(params: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create("sla", params, TTFT)


def test_latency_right_after_a_cut_proves_no_floor(obs: ObsFactory) -> None:
    a = algo()
    assert a.update(measured(obs, 8, 2.2, 100.0)).limit == 4
    # A second later the P90 still comes from requests that shared a batch of 8 with the earlier
    # ones: it says nothing yet about 4, so no floor is proven by 4 and 8 being alike.
    d = a.update(obs(limit=4, p90={"ttft": 1.9}, now=101.0, interval=1.0, since_change=1.0))
    assert not d.sla_infeasible and d.reason == "insufficient_samples"


def test_a_floor_needs_limits_a_span_apart(obs: ObsFactory) -> None:
    # 14 and 16 both over target by about as much: a step apart, that is noise, not a floor.
    a = algo()
    a.update(measured(obs, 16, 1.5, 96.0))
    d = a.update(measured(obs, 14, 1.45, 100.0))
    assert not d.sla_infeasible and d.reason == "p90_over_target"


def test_a_second_cut_waits_for_the_first_to_take_effect(obs: ObsFactory) -> None:
    a = algo()
    assert a.update(measured(obs, 20, 1.5, 100.0)).limit == 13
    early = obs(limit=13, p90={"ttft": 1.5}, now=101.0, interval=1.0, since_change=1.0)
    assert a.update(early).reason == "insufficient_samples"
    late = obs(limit=13, p90={"ttft": 1.5}, now=103.0, interval=1.0, since_change=3.0)
    assert a.update(late).limit < 13


def test_a_cut_takes_effect_once_the_requests_over_the_new_limit_finish(obs: ObsFactory) -> None:
    a = algo()
    assert a.update(measured(obs, 10, 2.0, 100.0)).limit == 5
    # The ten requests in flight at the cut finish over six seconds, nothing new dispatched: what is
    # measured meanwhile is of 10, not 5.
    for t in range(1, 7):
        tick = obs(limit=5, peak_inflight=10, p90={"ttft": 1.3}, now=100.0 + t, interval=1.0, since_change=t)
        d = a.update(tick)
        assert (d.limit, d.reason) == (5, "insufficient_samples") and "takes effect" in d.detail
    # In force from 106, the start of the first tick with no more than 5 in flight; settled 2 s on.
    early = obs(limit=5, p90={"ttft": 1.3}, now=107.0, interval=1.0, since_change=7.0)
    assert a.update(early).reason == "insufficient_samples"
    late = obs(limit=5, p90={"ttft": 1.3}, now=108.0, interval=1.0, since_change=8.0)
    assert a.update(late).limit == 3  # 5 / 1.3


def test_a_cut_after_a_long_hold_does_not_interpolate_with_older_readings(obs: ObsFactory) -> None:
    a = algo()
    a.update(measured(obs, 10, 0.5, 100.0))
    # 16 held for 20 s and is over target now: the backend changed, and 10's reading is of before.
    tick = obs(limit=16, p90={"ttft": 2.0}, now=120.0, interval=1.0, since_change=20.0)
    d = a.update(tick)
    assert d.limit == 8 and "16 / 2.00" in d.detail  # not 12, the secant through 10


def test_past_what_the_kv_cache_holds_a_steep_secant_is_followed(obs: ObsFactory) -> None:
    # 0.60x at 18 and 2.06x at 20, with 17 requests fitting the KV cache: preemption's knee, not a
    # backend that changed between the readings. The secant gives 18.5; L / r would give 10.
    a = algo()
    a.update(replace(measured(obs, 18, 0.60, 100.0), kv_fits=17))
    d = a.update(replace(measured(obs, 20, 2.06, 101.0), kv_fits=17))
    assert d.limit == 18 and "between 18" in d.detail
    below = algo()
    below.update(replace(measured(obs, 18, 0.60, 100.0), kv_fits=24))
    assert below.update(replace(measured(obs, 20, 2.06, 101.0), kv_fits=24)).limit == 10


def test_a_raise_is_judged_on_what_it_delivered_once_its_requests_turned_over(obs: ObsFactory) -> None:
    # 20 (what the KV cache holds) delivered 1,000 tokens/s (the engine's count) with a median e2e
    # of 8 s. Raised to 22 (one step), the rate reads 1,300 tokens/s for 8 s, until the requests in
    # flight have turned over, and 900 from then on; the median e2e of the answers back is of the
    # shortest.
    # Judged on its first seconds the raise was kept; judged once 20's median e2e has passed, it is
    # undone.
    a = algo()
    every_tick = {"p90": {"ttft": 0.3}, "interval": 1.0, "kv_fits": 20}
    for t in range(6):
        d = a.update(
            obs(
                limit=20,
                now=100.0 + t,
                since_change=10.0 + t,
                delivered_tokens=1000.0,
                finished=3,
                p50={"e2e": 8.0},
                counts={"ttft": 3 if t < 5 else 50, "e2e": 50},  # 20 measured 5 s before it may grow
                **every_tick,
            )
        )
    assert (d.limit, d.reason) == (22, "probe")
    decisions = [
        a.update(
            obs(
                limit=22,
                now=106.0 + t,
                since_change=t,
                delivered_tokens=1300.0 if t < 8 else 900.0,
                finished=3,
                p50={"e2e": 1.5},
                counts={"ttft": 50, "e2e": min(t, 7)},  # fewer than min_samples (8)
                **every_tick,
            )
        )
        for t in range(1, 40)
    ]
    judged = next(d for d in decisions if d.reason != "probing")
    assert (judged.limit, judged.reason) == (20, "no_gain")


@pytest.mark.parametrize(("running", "undone_after"), [(20.0, 3), (21.5, 12)])
def test_a_raise_the_engine_did_not_run_is_undone_before_its_requests_turned_over(
    obs: ObsFactory, running: float, undone_after: int
) -> None:
    # As above, with the engine's count: at 20 it ran all 20. Raised to 22 (one step), the rate
    # reads a burst until the requests turn over. Where the engine still ran 20 (2 waiting: the
    # KV cache full), no rate could have grown, and the raise is undone on its second tick in
    # force; where it ran 21.5, the rate decides, once they turned over.
    a = algo()
    every_tick = {"p90": {"ttft": 0.3}, "interval": 1.0, "kv_fits": 20}

    def counted(t: float, limit: int, run: float) -> dict[str, object]:
        stats = engine_stats(at=t, running=run, waiting=limit - run)
        return {"now": t, "limit": limit, "engine_stats": stats, "outside_engine": 0.0}

    for t in range(6):
        d = a.update(
            obs(
                since_change=10.0 + t,
                delivered_tokens=1000.0,
                finished=3,
                p50={"e2e": 8.0},
                counts={"ttft": 3 if t < 5 else 50, "e2e": 50},
                **counted(100.0 + t, 20, 20.0),
                **every_tick,
            )
        )
    assert (d.limit, d.reason) == (22, "probe")
    for t in range(1, 40):
        d = a.update(
            obs(
                since_change=t,
                delivered_tokens=1300.0 if t < 8 else 900.0,
                finished=3,
                p50={"e2e": 1.5},
                counts={"ttft": 50, "e2e": min(t, 7)},
                **counted(106.0 + t, 22, running),
                **every_tick,
            )
        )
        if d.reason != "probing":
            break
    assert (t, d.limit, d.reason) == (undone_after, 20, "no_gain")


def test_near_a_known_knee_growth_is_one_proportional_step(obs: ObsFactory) -> None:
    a = algo()
    a.update(measured(obs, 24, 0.95, 90.0))  # the knee: at the band
    # Far under the band at 20, yet only p x L = 2 up, and never into 24.
    assert a.update(measured(obs, 20, 0.3, 100.0)).limit == 22
    a2 = algo()
    a2.update(measured(obs, 21, 0.95, 90.0))
    assert a2.update(measured(obs, 20, 0.3, 95.0)).direction == Direction.HOLD


def test_a_knee_read_on_few_values_goes_once_the_limit_reads_under_the_band_on_evidence(
    obs: ObsFactory,
) -> None:
    def tick(ratio: float, now: float, counts: int) -> Observation:
        return replace(measured(obs, 8, ratio, now), kv_fits=16, counts={"ttft": counts})

    a = algo()
    # A fresh gateway's first P90 at 8 reads at the band on 3 values: a knee, growth holds.
    assert a.update(tick(0.92, 100.0, 3)).limit == 8
    # 8 then reads 0.5x on evidence: room 8 x ((0.9 / 0.5)^2 - 1) = 17, to what the KV cache holds.
    assert a.update(tick(0.5, 101.0, 20)).limit == 16
    # A knee above the limit stands, read on few values or not: one proportional step.
    b = algo()
    b.update(replace(tick(0.92, 100.0, 3), limit=10, peak_inflight=10))
    assert b.update(tick(0.5, 101.0, 20)).limit == 9


def test_a_limit_one_above_read_at_the_band_is_measured_again_after_probe_every(obs: ObsFactory) -> None:
    # One reading of 8 at 1.06x (the first batch of a fresh gateway, one TPOT spike) held a tight
    # cell at 7 for the ledger's 30 s memory where 8 met the target.
    a = algo()
    a.update(measured(obs, 8, 1.06, 90.0))
    assert a.update(measured(obs, 7, 0.8, 95.0)).direction == Direction.HOLD
    d = a.update(measured(obs, 7, 0.8, 100.0))
    assert d.limit == 8 and "8 again" in d.detail


def test_a_lumped_rate_difference_within_count_noise_does_not_move_the_limit(obs: ObsFactory) -> None:
    # Non-streaming: all tokens arrive as whole answers, 5 a second of 200 tokens.
    def tick(limit: int, t: float, tokens: float) -> Observation:
        return obs(
            limit=limit,
            p90={"ttft": 0.5},
            now=t,
            interval=1.0,
            since_change=10.0 + t % 100,
            delivered_tokens=tokens,
            lumped_tokens=tokens,
            finished=round(tokens / 200),
        )

    a = algo()
    for t in range(5):
        a.update(tick(14, 100.0 + t, 1000.0))
    for t in range(5):
        d = a.update(tick(20, 105.0 + t, 900.0))
    # 10% less over about 25 answers each: within two standard deviations of the counts.
    assert d.reason != "throughput_falls"


def test_requests_held_outside_the_engine_stop_growth(obs: ObsFactory) -> None:
    a = algo()
    a.update(
        obs(
            limit=10,
            p90={"ttft": 0.3},
            now=100.0,
            interval=1.0,
            since_change=10.0,
            engine_stats=engine_stats(at=99.8, running=9.0, waiting=0.0),
            outside_engine=1.0,
        )
    )
    # At 14 the engine still counts 9: the 4 more wait outside it.
    d = a.update(
        obs(
            limit=14,
            p90={"ttft": 0.3},
            now=110.0,
            interval=1.0,
            since_change=10.0,
            engine_stats=engine_stats(at=109.8, running=9.0, waiting=0.0),
            outside_engine=5.0,
        )
    )
    assert d.direction == Direction.HOLD and "outside the engine" in d.detail


def test_a_front_end_stall_that_passed_does_not_stop_growth(obs: ObsFactory) -> None:
    a = algo()

    def tick(limit: int, now: float, outside: float) -> Decision:
        stats = engine_stats(at=now - 0.2, running=float(limit) - outside, waiting=0.0)
        return a.update(
            obs(
                limit=limit,
                p90={"ttft": 0.3},
                now=now,
                interval=1.0,
                since_change=10.0,
                engine_stats=stats,
                outside_engine=outside,
            )
        )

    tick(10, 100.0, 1.0)
    # For a second the engine counted none of the 14 in flight; the mean at 14 remembers it for
    # a half-life, but the reading now is back to the 1 of limit 10.
    assert "outside the engine" in tick(14, 110.0, 14.0).detail
    d = tick(14, 111.0, 1.0)
    assert d.direction == Direction.UP and d.reason == "probe"


def test_defaults_are_the_parameter_fields() -> None:
    a = algo()
    assert a.params == SLAParams()
    assert a.initial_limit(1, 64) == SLAParams().initial


def test_an_infeasible_climb_goes_straight_to_what_the_kv_cache_holds(obs: ObsFactory) -> None:
    def first_probe(fits: int | None, **kw: object) -> Decision:
        a = algo()
        d, seen = until_infeasible(a, obs, 100.0, delivered_tokens=1000.0, kv_fits=fits)
        if d.limit > seen[-1] and "most throughput" not in d.detail:
            return d
        limit, changed = d.limit, 150.0
        for i in range(20):
            now = 150.0 + i
            since = now - changed + 10.0
            d = a.update(
                outside(obs, now, limit, since_change=since, delivered_tokens=1000.0, kv_fits=fits, **kw)
            )
            if d.limit > limit and "most throughput" not in d.detail:
                return d
            limit = d.limit
        raise AssertionError("no probe")

    # The floor is proven (the front end's delay at 6, which a cut from 12 left): the first probe
    # goes to the 30 the cache holds, not to 6 + 0.5 x 6 = 9.
    d = first_probe(30)
    assert d.sla_infeasible and (d.limit, d.direction) == (30, Direction.UP) and "KV cache" in d.detail
    # Without the engine's word on its cache, or with a cache that holds no more than a step: a step.
    assert first_probe(None).limit == 9
    assert first_probe(8).limit == 9
    # Few first tokens at a low limit (long answers): the P90 is still over target on what there is,
    # and a throughput probe needs no more.
    few = first_probe(30, counts={"ttft": 5}, values={"ttft": [1.3] * 5})
    assert few.sla_infeasible and few.limit == 30


def first_probe_after_the_floor(a: SLALimit, ticks: Callable[[int, float, float], Observation]) -> float:
    """Seconds from the floor's proof to the first probe above the limit it was proven at."""
    limit, changed, proven_at = 12, 90.0, None
    for i in range(60):
        now = 100.0 + i
        d = a.update(ticks(limit, now, now - changed))
        if d.sla_infeasible and proven_at is None:
            proven_at = now
        if proven_at is not None and d.limit > limit and "most throughput" not in d.detail:
            return now - proven_at
        if d.limit != limit:
            limit, changed = d.limit, now
    raise AssertionError("no probe")


def test_a_proven_floor_probes_at_once(obs: ObsFactory) -> None:
    # The cuts that proved the floor were no failed probes: the first probe goes up from the limit
    # the floor was proven at, at once, whether that limit was barely measured (the front end's
    # delay, proven as 6 settles after a cut from 12) or measured for `floor_dwell` (along the
    # limit: 5, after 12 and 8).
    def front_end(limit: int, now: float, since: float) -> Observation:
        return outside(obs, now, limit, since_change=since, delivered_tokens=1000.0, kv_fits=30)

    def along(limit: int, now: float, since: float) -> Observation:
        # 12 met the target (at 0.95, no room to grow) until 106; then no limit does.
        ratio = 0.95 if now < 106.0 else 1.45 if limit == 12 else 1.5
        return obs(
            limit=limit,
            p90={"ttft": ratio},
            now=now,
            interval=1.0,
            since_change=since,
            delivered_tokens=100.0 * limit,
            kv_fits=30,
        )

    assert first_probe_after_the_floor(algo(), front_end) == 0.0
    assert first_probe_after_the_floor(algo(), along) == 0.0


def test_a_jump_due_from_the_limit_with_the_most_throughput_goes_at_once(obs: ObsFactory) -> None:
    # 12 met the target and delivered most; then no limit does, and the floor is proven at 5 once
    # measured for 6 s. Going back to 12 to measure it again before the jump to what the KV cache
    # holds would cost a settle and a dwell: the jump goes at once, judged against 12 as measured.
    a, limit, changed, seen = algo(floor_dwell=6.0), 12, 90.0, []
    for i in range(30):
        now = 100.0 + i
        ratio = 0.95 if now < 106.0 else 1.45 if limit == 12 else 1.5
        rate = 60.0 * limit if limit == 12 else 100.0 * limit
        d = a.update(
            obs(
                limit=limit,
                p90={"ttft": ratio},
                now=now,
                interval=1.0,
                since_change=now - changed,
                delivered_tokens=rate,
                kv_fits=30,
            )
        )
        seen.append((limit, d.limit, d.detail))
        if d.limit != limit:
            limit, changed = d.limit, now
    moves = [(was, to) for was, to, _ in seen if to != was]
    assert moves[:3] == [(12, 8), (8, 5), (5, 30)]
    assert any("measuring 30 against 12" in detail for *_, detail in seen)


def test_within_target_the_limit_comes_down_to_the_batch_the_engine_ran(obs: ObsFactory) -> None:
    # At 48 the engine ran 32 (its `max_num_seqs`) and held 16 in its queue, where they add nothing
    # to its rate: the limit tries 32, keeps it where it delivered as much, and a raise from there
    # is judged on its gain, as one past the KV cache is.
    a = algo()

    def tick(limit: int, t: float, since: float, values: int = 50) -> Decision:
        stats = engine_stats(at=t - 0.2, running=32.0, waiting=limit - 32.0)
        at = replace(measured(obs, limit, 0.3, t), since_change=since, counts={"ttft": values})
        return a.update(replace(at, engine_stats=stats, outside_engine=0.0))

    # Too few values at 48 to grow on for its first 8 s: it is measured first.
    d = next(d for t in range(20) if (d := tick(48, 100.0 + t, 10.0 + t, 3 if t < 8 else 50)).limit != 48)
    assert (d.limit, d.reason) == (32, "probe") and "16 of 48 waiting" in d.detail
    kept = next(t for t in range(1, 30) if (d := tick(32, 120.0 + t, float(t))).reason != "probing")
    assert (d.limit, d.reason) == (32, "probe")
    raised = next(d for t in range(kept + 1, 40) if (d := tick(32, 120.0 + t, float(t))).limit != 32)
    assert raised.limit > 32 and "kept on a measured gain" in raised.detail


def test_no_raise_from_a_limit_at_which_the_engine_queued(obs: ObsFactory) -> None:
    # At 27 the engine ran 25 (its KV cache full) and held 2 in its queue: a raise would only
    # lengthen that queue, whatever a noisy goodput reading says; the limit stays or comes down.
    a = algo()
    seen = []
    for t in range(60):
        stats = engine_stats(at=99.8 + t, running=25.0, waiting=2.0)
        at = replace(measured(obs, 27, 0.3, 100.0 + t), since_change=10.0 + t, counts={"ttft": 50})
        seen.append(a.update(replace(at, engine_stats=stats, outside_engine=0.0)))
    assert max(d.limit for d in seen) <= 27
    assert any("held 2.0 of 27 waiting" in d.detail for d in seen)
