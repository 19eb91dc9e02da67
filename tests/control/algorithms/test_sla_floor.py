"""The two proofs of a latency floor: along the limit on hand-built ledger entries, and the front
end's delay tick by tick."""

from __future__ import annotations

from limits_helpers import engine_stats, make_obs

from gateway.control.algorithms.sla.floor import FrontEndDelay, ProvenFloor, along_the_limit
from gateway.control.algorithms.sla.ledger import Entry, Ledger, Reading
from gateway.control.algorithms.sla.params import SLAParams
from gateway.types import Observation, Signal


def entry(
    limit: int, ratio: float, p90: float, signal: Signal = "tpot", ttft: Reading | None = None
) -> Entry:
    """`limit` measured for a second, its `signal` read at `ratio` of its target (`p90` s), and TTFT
    read as `ttft` if given."""
    readings: dict[Signal, Reading] = {signal: Reading(ratio, p90)}
    if ttft is not None:
        readings["ttft"] = ttft
    return Entry(limit, at=0.0, tokens=100.0, seconds=1.0, measured=1.0, ratio=ratio, readings=readings)


def test_flat_latency_from_the_lowest_limit_up_is_a_floor() -> None:
    entries = [entry(5, 1.07, 0.016), entry(12, 1.05, 0.0158)]
    assert along_the_limit(entries, 1, span=2.0) == {"tpot": 0.0158}


def test_one_steep_pair_is_enough_to_doubt_the_floor() -> None:
    # 12 was measured before the backend slowed down and looks as slow as 5 after it; 10, measured
    # after, shows latency rising with the limit: the line through 5 and 10 is under 1 at the floor.
    entries = [entry(5, 1.07, 0.016), entry(10, 1.85, 0.028), entry(12, 1.05, 0.0158)]
    assert along_the_limit(entries, 1, span=2.0) is None


def test_a_steep_rise_closer_than_the_span_refutes_the_floor() -> None:
    # 12 read 1.08 on the tick capacity halved; 11, measured after, shows latency rising fast.
    entries = [entry(6, 1.06, 0.0159), entry(11, 1.63, 0.0244), entry(12, 1.08, 0.0162)]
    assert along_the_limit(entries, 1, span=2.0) is None
    # A gentle rise from a closer limit leaves the floor standing.
    entries[1] = entry(11, 1.08, 0.0162)
    assert along_the_limit(entries, 1, span=2.0) == {"tpot": 0.0159}


def test_latency_that_rises_steepest_at_the_lowest_limits_is_no_floor() -> None:
    # The real engine, TPOT with long prompts: 1.69x at 4 and 2.26x at 8, where 1 read 0.45x and
    # 3 1.07x. The line through 4 and 8 is 1.26x at 1; the power law through them 0.94x.
    entries = [entry(4, 1.69, 0.015), entry(8, 2.26, 0.020)]
    assert along_the_limit(entries, 1, span=2.0) is None
    # Latency with a floor of its own, rising gently with the limit: both curves are over 1 at the
    # floor (the line 2.80x at 1, the power law 2.59x).
    entries = [entry(4, 2.95, 0.026), entry(8, 3.15, 0.028)]
    assert along_the_limit(entries, 1, span=2.0) == {"tpot": 0.026}


def test_a_higher_limit_that_met_the_target_refutes_the_floor() -> None:
    # 12 met the target before capacity halved; 6, measured after, misses it. Latency falls along
    # that line, which alone would prove a floor, but the SLA was met at 12: the backend changed.
    entries = [entry(6, 1.18, 0.0177), entry(12, 0.87, 0.013)]
    assert along_the_limit(entries, 1, span=2.0) is None
    entries[1] = entry(12, 1.02, 0.0153)
    assert along_the_limit(entries, 1, span=2.0) == {"tpot": 0.0153}


def test_the_floor_is_reported_for_the_signal_the_lowest_limit_missed() -> None:
    # Under an SLA on TTFT and TPOT each limit reads both. The floor is the lowest limit's signal,
    # with the lowest P90 of that signal over target; a TTFT read over target higher up is latency
    # the limit adds, not a floor, and never a TPOT P90 as a TTFT floor.
    low = entry(1, 1.49, 0.007)
    high = entry(4, 2.4, 0.071, "ttft")
    assert along_the_limit([low, high], 1, span=2.0) == {"tpot": 0.007}
    higher = entry(8, 1.6, 0.0075)
    assert along_the_limit([low, high, higher], 1, span=2.0) == {"tpot": 0.007}


def test_each_signal_is_drawn_along_the_limits_that_read_it() -> None:
    # A front end's stall put TTFT at 59x its target at 4, where TPOT read 4x; 2 read TPOT 3.3x.
    # Through the worst ratios the line would fall steeply (a cut would seem to help); TPOT's own
    # line is nearly flat, still 2.95x at the floor limit: a TPOT floor, proven at 2.
    low = entry(2, 3.3, 0.005, ttft=Reading(2.1, 0.092))
    high = entry(4, 4.0, 0.006, ttft=Reading(59.6, 2.56))
    high.ratio = 59.6
    assert along_the_limit([low, high], 1, span=2.0) == {"tpot": 0.005}
    # Both signals flat: both floors.
    high.readings["ttft"] = Reading(2.2, 0.096)
    assert along_the_limit([low, high], 1, span=2.0) == {"tpot": 0.005, "ttft": 0.092}
    # A limit that read only TTFT says nothing of TPOT, for or against.
    assert along_the_limit([low, entry(4, 0.5, 0.02, "ttft")], 1, span=2.0) is None


def test_limits_closer_than_the_span_prove_nothing() -> None:
    assert along_the_limit([entry(5, 1.5, 0.02), entry(9, 1.5, 0.02)], 1, span=2.0) is None
    assert along_the_limit([entry(1, 1.5, 0.02)], 1, span=2.0) == {"tpot": 0.02}


def test_the_lowest_limit_proves_a_floor_only_once_measured_for_the_dwell() -> None:
    entries = [entry(5, 1.07, 0.016), entry(12, 1.05, 0.0158)]  # 5 measured for 1 s
    assert along_the_limit(entries, 1, span=2.0, dwell=4.0) is None
    entries[0].measured = 4.0
    assert along_the_limit(entries, 1, span=2.0, dwell=4.0) == {"tpot": 0.0158}


def delayed(now: float, limit: int) -> Observation:
    """TTFT 1.3 s at the proxy, 0.1 s in the engine: 1.2 s spent before the engine saw the request."""
    stats = engine_stats(at=now - 0.5, ttft_p90=0.1)
    return make_obs(now=now, limit=limit, p90={"ttft": 1.3}, interval=1.0, engine_stats=stats)


def test_the_front_ends_delay_is_a_floor_only_where_a_cut_to_half_left_it() -> None:
    delay = FrontEndDelay(dwell=4.0, span=2.0, memory=30.0)
    assert [delay.floor(delayed(100.0 + i, 8), 1.0, settled=True) for i in range(6)] == [None] * 6
    assert delay.since == 100.0  # over target since then, but 8 is all that showed it
    assert delay.floor(delayed(106.0, 4), 1.0, settled=False) is None  # the cut has not taken effect
    assert delay.floor(delayed(108.0, 4), 1.0, settled=True) == 1.2
    assert FrontEndDelay(dwell=4.0, span=2.0, memory=30.0).floor(delayed(100.0, 1), 1.0, True) is None


def test_a_reading_within_target_starts_the_dwell_again() -> None:
    delay = FrontEndDelay(dwell=4.0, span=2.0, memory=30.0)
    for i in range(5):
        delay.floor(delayed(100.0 + i, 1), 1.0, settled=True)
    assert delay.floor(delayed(105.0, 1), 2.0, settled=True) is None  # 1.2 s is within a 2 s target
    assert delay.since is None
    assert delay.floor(delayed(106.0, 1), 1.0, settled=True) is None
    assert delay.floor(delayed(110.0, 1), 1.0, settled=True) == 1.2  # at the floor limit, after the dwell


def test_the_front_ends_delay_holds_the_limit_only_where_it_can_prove_a_floor() -> None:
    delay = FrontEndDelay(dwell=4.0, span=2.0, memory=30.0)
    assert delay.floor(delayed(100.0, 8), 1.0, settled=True) is None
    assert not delay.in_doubt(delayed(100.0, 8))  # no limit twice as high showed it: nothing to wait for
    assert delay.in_doubt(delayed(101.0, 4))  # 8 showed it, so 4 can prove it
    assert not delay.in_doubt(delayed(108.0, 4))  # over target for twice the dwell: decided


def at_limit(outside: float, per_second: float, seconds: int = 4, waiting: float = 0.0) -> Entry:
    """46 measured for `seconds`: `outside` requests held outside the engine and `waiting` in its
    queue on average (it ran the rest) while `per_second` finished each second."""
    ledger = Ledger(half_life=10.0, memory=30.0)
    for t in range(seconds):
        running = 46 - outside - waiting
        e = ledger.record_rate(
            110.0 + t, 46, 900.0, 1.0, finished=per_second, hidden=outside, running=running
        )
    return e


def test_a_floor_proven_on_the_front_ends_delay_is_outlived_once_the_front_end_holds_little() -> None:
    found = ProvenFloor(SLAParams())
    for i in range(5):
        found.find(delayed(100.0 + i, 8), "ttft", 1.0, True, [])
    assert found.find(delayed(105.0, 4), "ttft", 1.0, True, []) == {"ttft": 1.2}
    # At 46, 1 request outside while 12.5 finish a second: 0.08 s each, 0.18 s as a P90; the
    # target is 1 s.
    assert found.outlived(114.0, at_limit(1.0, 12.5), 1.0, in_force=10.0)
    assert not found.outlived(
        114.0, at_limit(1.0, 12.5, seconds=3), 1.0, in_force=10.0
    )  # not measured for the dwell
    # With 20 waiting in the engine's queue, those would have waited as long had the front end held
    # them: the time outside reads short whether the front end still holds requests or not.
    assert not found.outlived(114.0, at_limit(1.0, 12.5, waiting=20.0), 1.0, in_force=10.0)
    # 6 outside at that pace: 0.48 s each, 1.1 s as a P90 of an exponential delay: it still holds.
    assert not found.outlived(114.0, at_limit(6.0, 12.5), 1.0, in_force=10.0)


def test_a_floor_is_outlived_only_on_what_was_measured_after_it() -> None:
    found = ProvenFloor(SLAParams())
    for i in range(5):
        found.find(delayed(100.0 + i, 8), "ttft", 1.0, True, [])
    assert found.find(delayed(105.0, 4), "ttft", 1.0, True, []) is not None
    # The climb goes to 46, whose entry shows little time outside the engine: what it holds counts
    # only once 46 has been in force for the dwell (4 s), and the floor proven as long.
    at_46 = at_limit(1.0, 12.5)
    assert not found.outlived(107.0, at_46, 1.0, in_force=2.0)  # 46's entry is of before its climb
    assert not found.outlived(107.0, at_46, 1.0, in_force=30.0)  # in force since before the proof
    assert found.outlived(110.0, at_46, 1.0, in_force=5.0)


def test_a_ttft_floor_along_the_limit_is_outlived_only_where_it_was_spent_outside_the_engine() -> None:
    # 4 and 8 read TTFT 0.85-1.0 s against 0.32 while the front end held each request about 1 s
    # (4 outside while 4 finished a second at 4): a stall, gone once 46 holds 1 at 12.5 a second.
    def stalled(outside: float) -> list[Entry]:
        low, high = at_limit(outside, 4.0), entry(8, 2.62, 0.846, "ttft")
        low.limit, low.ratio, low.readings = 4, 3.16, {"ttft": Reading(3.16, 1.0)}
        return [low, high]

    found = ProvenFloor(SLAParams())
    assert found.find(make_obs(now=114.0, limit=4), "ttft", 0.32, True, stalled(4.0)) == {"ttft": 0.846}
    assert found.outlived(118.0, at_limit(1.0, 12.5), 0.32, in_force=10.0)
    # Proven on a tick where TPOT is what reads over target, it is the same floor.
    found = ProvenFloor(SLAParams())
    assert found.find(make_obs(now=114.0, limit=4), "tpot", 0.32, True, stalled(4.0)) == {"ttft": 0.846}
    assert found.outlived(118.0, at_limit(1.0, 12.5), 0.32, in_force=10.0)
    # The same floor with nothing held outside the engine is the engine's own latency.
    assert found.find(make_obs(now=114.0, limit=4), "ttft", 0.32, True, stalled(0.0)) is not None
    assert not found.outlived(118.0, at_limit(1.0, 12.5), 0.32, in_force=10.0)


def test_a_tpot_floor_is_not_outlived_by_the_front_end() -> None:
    found = ProvenFloor(SLAParams())
    entries = [entry(5, 1.07, 0.016), entry(12, 1.05, 0.0158)]
    for e in entries:
        e.measured = 4.0
    assert found.find(make_obs(now=100.0, limit=5), "tpot", 0.015, True, entries) is not None
    assert not found.outlived(114.0, at_limit(0.0, 12.5), 1.0, in_force=10.0)
