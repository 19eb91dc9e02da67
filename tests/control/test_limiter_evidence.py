from __future__ import annotations

import math

import pytest
from limiter_helpers import Progress

from gateway.control.evidence import E2E_OVERDUE, Evidence
from gateway.control.pace import PARTIAL_MIN_EVENTS
from gateway.types import SLA, EngineStats, Sample
from tests.clock import FakeClock


def evidence(**kw: object) -> tuple[Evidence, FakeClock]:
    clock = FakeClock(100.0)
    ev = Evidence(clock, **kw)  # type: ignore[arg-type]
    ev.start_epoch(clock.now)
    return ev, clock


def p90(ev: Evidence, newest: int | None = None) -> dict[str, float]:
    return dict(ev.percentiles(ev.live(), newest).p90)


def stream(ev: Evidence, key: object, dispatched: float, gap: float, events: int) -> Progress:
    """A stream whose first token came 0.1 s after dispatch, then one event every `gap` seconds."""
    first = dispatched + 0.1
    progress = Progress(first, first + gap * (events - 1), events)
    ev.watch(key, dispatched, progress)
    return progress


def one_token_an_event(ev: Evidence, clock: FakeClock) -> None:
    """A stream finishes whose `usage` counts as many tokens as it had events (it has no TPOT)."""
    stream(ev, "learned", clock.now, 0.06, 20)
    ev.finish("learned", Sample(dispatched_at=clock.now, e2e=1.2, output_tokens=20))


def test_failed_requests_are_not_latency_samples() -> None:
    ev, clock = evidence()
    ev.finish(1, Sample(dispatched_at=clock.now, e2e=0.001, ok=False))
    ev.finish(2, Sample(dispatched_at=clock.now, e2e=3.0))
    assert p90(ev) == {"e2e": 3.0} and len(ev) == 1


def test_ttft_counts_when_the_first_token_arrives() -> None:
    ev, clock = evidence()
    ev.first_token(clock.now, 0.3)
    assert p90(ev) == {"ttft": 0.3}  # known long before the request finishes
    ev.finish(1, Sample(dispatched_at=clock.now, e2e=5.3, tpot=0.01, output_tokens=500))
    assert p90(ev) == {"ttft": 0.3, "tpot": 0.01, "e2e": 5.3}


def test_a_new_epoch_drops_what_was_sent_before() -> None:
    ev, clock = evidence()
    ev.finish(1, Sample(dispatched_at=clock.now, e2e=1.0))
    clock.now += 1.0
    ev.start_epoch(clock.now)
    ev.finish(2, Sample(dispatched_at=clock.now - 0.5, e2e=9.0))
    assert len(ev) == 0 and p90(ev) == {}


def test_control_reads_the_newest_values_and_the_window_all() -> None:
    ev, clock = evidence()
    for i, ttft in enumerate((5.0, 5.0, 5.0, 5.0, 0.1, 0.1, 0.1, 0.1)):
        ev.finish(i, Sample(dispatched_at=clock.now, e2e=1.0, ttft=ttft))
    assert p90(ev)["ttft"] == 5.0 and p90(ev, newest=4)["ttft"] == 0.1


def test_requests_overdue_for_their_first_token_count_before_any_token_arrives() -> None:
    ev, clock = evidence(sla=SLA(ttft_p90=1.0))
    for key in range(4):
        ev.watch(key, clock.now, Progress())
    clock.now += 0.5
    assert "ttft" not in p90(ev)  # not late yet: nothing is known
    clock.now += 2.5
    assert ev.live() == {"ttft": [3.0] * 4}  # each has waited 3 s: TTFT is at least that
    for key in range(4):
        ev.finish(key, None)
    assert ev.watching == 0 and ev.live() == {}


def test_the_pace_of_streams_in_flight_counts_as_tpot() -> None:
    ev, clock = evidence()
    one_token_an_event(ev, clock)
    start = clock.now
    for key in range(8):
        stream(ev, key, start, 0.06, 20)
    clock.now = start + 0.1 + 0.06 * 19 + 0.01
    assert ev.live()["tpot"] == pytest.approx([0.06] * 8)


def test_a_stream_needs_a_few_events_before_its_pace_counts() -> None:
    ev, clock = evidence()
    one_token_an_event(ev, clock)
    progress = stream(ev, 1, clock.now, 0.06, PARTIAL_MIN_EVENTS - 1)
    clock.now += 1.0
    assert "tpot" not in ev.live()
    progress.events += 1
    assert "tpot" in ev.live()


def test_a_stalled_stream_shows_its_stall() -> None:
    """Ten quick events, then nothing: two seconds after the first, the pace is 2 s / 10 events."""
    ev, clock = evidence()
    one_token_an_event(ev, clock)
    stream(ev, 1, clock.now, 0.01, 10)
    clock.now += 0.1 + 2.0
    assert ev.live()["tpot"] == [pytest.approx(0.2)]


def test_the_pace_is_per_token_when_events_carry_several() -> None:
    """A busy front end merges deltas: 60 tokens in 20 events, one every 0.06 s, is 0.02 s per token."""
    ev, clock = evidence()
    start = clock.now
    stream(ev, "done", start, 0.06, 20)
    ev.finish("done", Sample(dispatched_at=start, e2e=1.3, tpot=0.02, output_tokens=60))
    assert ev.tokens_per_event == pytest.approx(3.0)
    stream(ev, "live", start, 0.06, 20)
    clock.now = start + 0.1 + 0.06 * 19 + 0.01
    assert ev.live()["tpot"] == [pytest.approx(0.02)]


def test_the_pace_waits_for_a_stream_to_show_how_many_tokens_an_event_carries() -> None:
    ev, clock = evidence(sla=SLA(tpot_p90=0.05))
    stream(ev, 1, clock.now, 0.06, 20)
    clock.now += 0.1 + 0.06 * 19 + 0.01
    assert "tpot" not in ev.live()  # 0.06 s an event may be 0.02 s a token: unknown
    one_token_an_event(ev, clock)
    assert ev.live()["tpot"] == [pytest.approx(0.06)]


def test_before_tokens_per_event_are_known_a_pace_within_target_counts_as_a_bound() -> None:
    # An event carries at least one token: 0.03 s an event is at most 0.03 s a token.
    ev, clock = evidence(sla=SLA(tpot_p90=0.05))
    stream(ev, "slow", clock.now, 0.2, 10)  # over target, but under the P90 of ten
    stream(ev, "slower", clock.now, 0.2, 10)
    start = clock.now + 1.3
    for key in range(9):
        stream(ev, key, start, 0.03, 20)
    clock.now = start + 0.1 + 0.03 * 19 + 0.01
    ev.finish("slower", None)
    assert sorted(ev.live()["tpot"]) == pytest.approx([0.03] * 9 + [0.2])
    stream(ev, "slower", clock.now - 1.9, 0.2, 10)  # two of eleven over target: P90 over it
    assert "tpot" not in ev.live()


def test_without_usage_a_streams_tokens_are_its_events() -> None:
    ev, clock = evidence()
    stream(ev, "done", clock.now, 0.06, 20)
    ev.finish("done", Sample(dispatched_at=clock.now, e2e=1.3, tpot=0.06, output_tokens=20))
    assert ev.tokens_per_event == 1.0


def test_requests_sent_before_the_epoch_do_not_count() -> None:
    ev, clock = evidence(sla=SLA(ttft_p90=1.0, e2e_p90=1.0))
    one_token_an_event(ev, clock)
    stream(ev, 1, clock.now, 0.06, 20)
    ev.watch(2, clock.now, Progress())
    ev.watch(3, clock.now, None)
    clock.now += 3.0
    assert set(ev.live()) == {"ttft", "tpot", "e2e"}
    ev.start_epoch(clock.now)
    assert ev.live() == {}


def test_requests_in_flight_twice_past_the_e2e_target_count_as_misses_before_they_end() -> None:
    """Whole answers say nothing until they end; one in flight past twice the target has missed it."""
    ev, clock = evidence(sla=SLA(e2e_p90=1.0))
    ev.finish(0, Sample(dispatched_at=clock.now, e2e=0.5))
    for key in range(1, 4):
        ev.watch(key, clock.now, None)  # non-streaming
    ev.watch(4, clock.now, Progress())  # a stream counts as well
    clock.now += E2E_OVERDUE * 1.0  # late, but not yet by twice the target
    assert ev.live() == {}
    clock.now += 0.5
    assert ev.live() == {"e2e": [2.5] * 4}  # each has run 2.5 s: e2e is at least that
    got = ev.percentiles(ev.live())
    assert got.p90["e2e"] == 2.5 and got.counts["e2e"] == 5 and got.values["e2e"] == [0.5] + [2.5] * 4
    ev.finish(1, Sample(dispatched_at=clock.now - 2.5, e2e=2.5))
    assert ev.live() == {"e2e": [2.5] * 3}  # a finished request counts once, as a sample


def test_the_backend_histogram_fills_ttft_and_tpot_of_non_streaming_traffic() -> None:
    ev, clock = evidence(min_samples=5)
    ev.finish(1, Sample(dispatched_at=clock.now, e2e=2.0))  # non-streaming
    scrape = EngineStats(at=clock.now, ttft_p90=2.5, tpot_p90=0.05)
    got = ev.percentiles({}, None, scrape)
    assert got.p90 == {"e2e": 2.0, "ttft": 2.5, "tpot": 0.05}
    assert got.counts == {"e2e": 1, "ttft": 5, "tpot": 5} and "ttft" not in got.values
    clock.now += 1.0
    ev.start_epoch(clock.now)
    assert ev.percentiles({}, None, scrape).p90 == {}  # scraped before the change
    # e2e is measured on every request: before one sent at the new limit ends, there is none
    later = EngineStats(at=clock.now + 1.0, ttft_p90=2.5, tpot_p90=0.05)
    assert ev.percentiles({}, None, later).p90 == {"ttft": 2.5, "tpot": 0.05}


def test_streams_in_flight_measure_ttft_and_tpot_themselves() -> None:
    """A fresh epoch's streams have no pace yet; the backend's histogram does not fill in for them."""
    ev, clock = evidence(min_samples=5)
    one_token_an_event(ev, clock)
    clock.now += 1.0
    ev.start_epoch(clock.now)
    stream(ev, 1, clock.now, 0.02, PARTIAL_MIN_EVENTS - 1)
    scrape = EngineStats(at=clock.now, ttft_p90=0.4, tpot_p90=0.043)
    assert ev.percentiles(ev.live(), None, scrape).p90 == {}
    ev.finish(1, Sample(dispatched_at=clock.now, e2e=0.3, ttft=0.1, tpot=0.02, output_tokens=10))
    assert ev.percentiles(ev.live(), None, scrape).p90 == {"ttft": 0.1, "tpot": 0.02, "e2e": 0.3}


def test_signals_are_counted_separately() -> None:
    """A TTFT counts at the first token, the TPOT only when the request ends: counts say which."""
    ev, clock = evidence()
    for _ in range(8):
        ev.first_token(clock.now, 0.2)
    for key in range(3):
        ev.finish(key, Sample(dispatched_at=clock.now, e2e=1.0, tpot=0.02))
    got = ev.percentiles(ev.live())
    assert got.counts == {"ttft": 8, "tpot": 3, "e2e": 3}
    assert got.values["tpot"] == [0.02] * 3 and len(ev) == 11


def test_delivered_tokens_count_stream_progress_once_and_finished_requests_rest() -> None:
    ev, _ = evidence()
    progress = Progress(first_at=100.1, last_at=100.5, events=40)
    ev.watch("streaming", 100.0, progress)
    assert ev.take_delivered() == 40
    progress.events = 70
    ev.finish("streaming", Sample(dispatched_at=100.0, e2e=1.5, output_tokens=100))
    ev.finish("whole", Sample(dispatched_at=100.0, e2e=1.5, output_tokens=25))
    ev.finish("failed", Sample(dispatched_at=100.0, e2e=1.5, output_tokens=7, ok=False))
    ev.finish("no sample", None)
    assert ev.take_delivered() == 60 + 25 + 7
    assert ev.take_delivered() == 0
    # Of those, the tokens counted only at the end, and the requests they came from.
    assert ev.take_lumped() == (60 + 25 + 7, 3)
    assert ev.take_lumped() == (0, 0)


def test_answered_tokens_say_which_missed_a_target() -> None:
    ev, clock = evidence(sla=SLA(ttft_p90=0.5, tpot_p90=0.05, e2e_p90=4.0))
    sent = clock.now
    ev.finish("met", Sample(dispatched_at=sent, e2e=2.0, ttft=0.2, tpot=0.02, output_tokens=100))
    ev.finish("slow tokens", Sample(dispatched_at=sent, e2e=3.0, ttft=0.2, tpot=0.08, output_tokens=30))
    ev.finish("slow answer", Sample(dispatched_at=sent, e2e=5.0, output_tokens=50))
    # A non-streaming answer has no TTFT or TPOT to judge: only its e2e is.
    ev.finish("whole", Sample(dispatched_at=sent, e2e=3.0, output_tokens=20))
    ev.finish("failed", Sample(dispatched_at=sent, e2e=9.0, output_tokens=7, ok=False))
    assert ev.take_answered() == (100 + 30 + 50 + 20, 30 + 50)
    assert ev.take_answered() == (0, 0)


def test_stream_events_are_credited_at_the_tokens_they_carry_and_usage_corrects_the_credit() -> None:
    ev, clock = evidence()
    stream(ev, "taught", clock.now, 0.06, 10)
    ev.finish("taught", Sample(dispatched_at=clock.now, e2e=1.0, output_tokens=20))  # k = 2
    assert ev.take_delivered() == 20
    progress = stream(ev, "live", clock.now, 0.06, 10)
    assert ev.take_delivered() == 20  # 10 events of 2 tokens
    progress.events = 12
    ev.finish("live", Sample(dispatched_at=clock.now, e2e=1.0, output_tokens=22))
    assert ev.take_delivered() == pytest.approx(22 - 20)  # its usage: 22 tokens in all
    assert ev.take_lumped() == (20 + 2, 2)
    k = ev.tokens_per_event
    assert k is not None and k > 1.9
    stream(ev, "fewer", clock.now, 0.06, 10)
    assert ev.take_delivered() == pytest.approx(10 * k)
    ev.finish("fewer", Sample(dispatched_at=clock.now, e2e=1.0, output_tokens=10))
    assert ev.take_delivered() == pytest.approx(10 - 10 * k)  # one token an event after all


def test_the_cohort_is_every_request_of_the_epoch_in_the_order_sent() -> None:
    """Short answers that overtook a long one come after it, and the long one reads as infinite
    while it runs: the slow answers are not missing."""
    ev, clock = evidence()
    start = clock.now
    ev.watch("long", start + 1.0, None)
    for key, (sent, e2e) in enumerate([(start, 2.0), (start + 0.5, 3.0), (start + 2.0, 0.5)]):
        ev.watch(key, sent, None)
        ev.finish(key, Sample(dispatched_at=sent, e2e=e2e))
    clock.now = start + 4.0
    assert ev.cohorts()["e2e"] == [2.0, 3.0, math.inf, 0.5]
    ev.finish("long", Sample(dispatched_at=start + 1.0, e2e=4.0))
    assert ev.cohorts()["e2e"] == [2.0, 3.0, 4.0, 0.5]
    ev.start_epoch(clock.now)
    assert ev.cohorts() == {}


def test_a_burst_that_fills_the_limit_gives_bounds_until_the_limit_changes() -> None:
    ev, clock = evidence()
    stream(ev, 1, clock.now, 0.02, PARTIAL_MIN_EVENTS)
    ev.start_epoch(clock.now + 1.0)
    assert ev.bounds() == {}
    ev.start_epoch(clock.now + 2.0, burst=True)
    assert ev.bounds() != {}
    ev.start_epoch(clock.now + 3.0)
    ev.finish(1, Sample(dispatched_at=clock.now, e2e=1.0, ttft=0.1, tpot=0.03, output_tokens=30))
    assert ev.bounds() == {}


def test_every_stream_of_the_epoch_is_in_its_cohorts_at_its_worst_until_it_measures() -> None:
    """A stream with no first token, one with too few events for a pace, a request not finished:
    none is left out of the cohorts as if it were fast; the order is the order sent."""
    ev, clock = evidence(sla=SLA(ttft_p90=1.0, tpot_p90=0.1, e2e_p90=10.0))
    start = clock.now
    stream(ev, "paced", start, 0.02, PARTIAL_MIN_EVENTS)
    ev.first_token(start, 0.1)
    stream(ev, "young", start + 0.1, 0.02, PARTIAL_MIN_EVENTS - 1)
    ev.first_token(start + 0.1, 0.1)
    ev.watch("waiting", start + 0.2, Progress())
    clock.now = start + 0.5
    cohorts = ev.cohorts()
    assert cohorts["ttft"] == [0.1, 0.1, math.inf]
    assert math.isfinite(cohorts["tpot"][0]) and cohorts["tpot"][1:] == [math.inf] * 2  # a pace so far
    assert cohorts["e2e"] == [math.inf] * 3
    ev.start_epoch(clock.now)  # a limit change: they describe the old limit
    assert ev.cohorts() == {}
