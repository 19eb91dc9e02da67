import math

import pytest

from gateway.control.algorithms.sla.ledger import Ledger, Reading


def test_a_rate_is_the_decayed_tokens_over_the_decayed_seconds() -> None:
    ledger = Ledger(half_life=10.0, memory=30.0)
    ledger.record_rate(100.0, 8, 1000.0, 1.0)
    # Ten seconds later the first second weighs half: (0.5 x 1000 + 400) / (0.5 x 1 + 1) = 600.
    e = ledger.record_rate(110.0, 8, 400.0, 1.0)
    assert e.rate == pytest.approx(600.0)
    assert e.seconds == pytest.approx(1.5) and e.measured == pytest.approx(2.0)


def test_the_noise_is_that_of_the_count_of_whole_answers() -> None:
    ledger = Ledger(half_life=10.0, memory=30.0)
    streamed = ledger.record_rate(100.0, 8, 1000.0, 1.0, finished=4.0)
    assert streamed.noise == 0.0
    # All 1000 tokens came as 4 whole answers: a Poisson count of 4 varies by 1 / sqrt(4).
    lumped = ledger.record_rate(100.0, 9, 1000.0, 1.0, finished=4.0, lumped=1000.0)
    assert lumped.noise == pytest.approx(1.0 / math.sqrt(4.0))


def test_the_engine_counts_are_means_over_the_seconds_they_were_read() -> None:
    ledger = Ledger(half_life=10.0, memory=30.0)
    # A second without a scrape counts for neither; ten seconds on, the first reading weighs half.
    assert ledger.record_rate(101.0, 8, 1000.0, 1.0).running is None
    ledger.record_rate(102.0, 8, 1000.0, 1.0, hidden=2.0, running=6.0)
    e = ledger.record_rate(112.0, 8, 1000.0, 1.0, hidden=0.0, running=8.0)
    assert e.running == pytest.approx((0.5 * 6.0 + 8.0) / 1.5)
    assert e.hidden == pytest.approx((0.5 * 2.0) / 1.5)


def test_entries_not_updated_for_the_memory_are_forgotten() -> None:
    ledger = Ledger(half_life=10.0, memory=30.0)
    ledger.record_rate(100.0, 8, 1000.0, 1.0)
    ledger.record_ratio(120.0, 12, 1.2)
    assert [e.limit for e in ledger.fresh(125.0)] == [8, 12]
    assert [e.limit for e in ledger.fresh(131.0)] == [12]
    assert ledger.below(131.0, 16) is not None and ledger.below(131.0, 12) is None


def test_each_signal_keeps_its_newest_reading() -> None:
    ledger = Ledger(half_life=10.0, memory=30.0)
    ledger.record_readings(100.0, 8, {})
    assert ledger.get(8) is None  # nothing read: no entry
    ledger.record_readings(100.0, 8, {"ttft": Reading(2.0, 0.8), "tpot": Reading(1.2, 0.012)})
    ledger.record_readings(101.0, 8, {"tpot": Reading(1.1, 0.011)})
    e = ledger.get(8)
    assert e is not None and e.readings == {"ttft": Reading(2.0, 0.8), "tpot": Reading(1.1, 0.011)}
    assert e.at == 101.0


def test_a_limit_measured_again_after_a_gap_still_counts_as_measured() -> None:
    # 2 delivered 400 tok/s for 5 s; 19 delivered 950 for 5 s, and again for a second 13 s later.
    # The sums decay only when updated, so 19's weigh 2.9 s then while 2's, untouched since, still
    # weigh 5: judged on them, the limit with the most throughput measured for 4 s was 2.
    ledger = Ledger(half_life=10.0, memory=30.0)
    for t in range(5):
        ledger.record_rate(100.0 + t, 2, 400.0, 1.0)
        ledger.record_rate(110.0 + t, 19, 950.0, 1.0)
    again = ledger.record_rate(127.0, 19, 950.0, 1.0)
    assert again.seconds < 4.0 and again.measured == 6.0
    best = ledger.best(127.0, 4.0, good=False)
    assert best is not None and best.limit == 19


def test_the_seconds_spent_outside_the_engine_follow_littles_law() -> None:
    ledger = Ledger(half_life=10.0, memory=30.0)
    assert ledger.record_rate(100.0, 9, 1000.0, 1.0, hidden=2.0).outside_seconds is None  # none finished
    # Two requests held outside on average while four finish a second: each spent half a second there.
    for t in range(1, 5):
        e = ledger.record_rate(100.0 + t, 8, 1000.0, 1.0, finished=4.0, hidden=2.0)
    assert e.outside_seconds == pytest.approx(0.5)


def test_forgetting_latency_keeps_the_rates_and_the_limit_in_force() -> None:
    ledger = Ledger(half_life=10.0, memory=30.0)
    ledger.record_rate(100.0, 4, 300.0, 1.0)
    ledger.record_ratio(100.0, 4, 2.0)
    ledger.record_readings(100.0, 4, {"ttft": Reading(2.0, 0.8)})
    ledger.record_ratio(110.0, 46, 6.0)
    ledger.record_readings(110.0, 46, {"ttft": Reading(6.0, 2.4)})
    ledger.record_rate(110.0, 4, 0.0, 0.0, answered=500.0, missed=400.0)
    ledger.forget_latency(keep=46)
    low, high = ledger.fresh(111.0)
    assert (low.ratio, low.readings, low.rate, low.met) == (None, {}, 300.0, 1.0)
    assert (high.ratio, high.readings) == (6.0, {"ttft": Reading(6.0, 2.4)})


def test_goodput_is_the_rate_times_the_share_of_the_output_that_met_every_target() -> None:
    ledger = Ledger(half_life=10.0, memory=30.0)
    # Streamed at 1,000 tok/s; 25 answers finished, 1,000 of their 4,000 tokens in answers that
    # missed a target: goodput 750, and the share met, 0.75 of 25 answers, varies by
    # sqrt(0.75 x 0.25 / 25) = 0.087 as a binomial count does.
    e = ledger.record_rate(100.0, 8, 1000.0, 1.0, finished=25.0, answered=4000.0, missed=1000.0)
    assert e.met == pytest.approx(0.75)
    assert e.delivery(good=False) == (1000.0, 0.0)
    rate, sd = e.delivery(good=True)
    assert rate == pytest.approx(750.0)
    assert sd == pytest.approx(1000.0 * math.sqrt(0.75 * 0.25 / 25.0))
    # Before any answer, all of the rate counts.
    assert ledger.record_rate(100.0, 9, 500.0, 1.0).delivery(good=True) == (500.0, 0.0)
