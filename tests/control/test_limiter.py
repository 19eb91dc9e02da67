from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from limiter_helpers import Progress

from gateway.control.algorithms import create
from gateway.control.limiter import Limiter
from gateway.control.room import QUIET
from gateway.control.slots import Slot
from gateway.types import SLA, Decision, Direction, EngineStats, Observation, Sample
from tests.clock import FakeClock

TTFT_1S = SLA(ttft_p90=1.0)


def limiter(
    name: str = "aimd", params: dict[str, object] | None = None, **kw: object
) -> tuple[Limiter, FakeClock]:
    clock = FakeClock(100.0)
    algo = create(name, params or {}, TTFT_1S)
    lim = Limiter(algo, clock=clock, **kw)  # type: ignore[arg-type]
    return lim, clock


def fill(lim: Limiter) -> list[Slot]:
    return [lim.acquire() for _ in range(lim.limit)]


def busy(lim: Limiter) -> None:
    """A limit that has been binding: the burst that first filled it started an epoch of its own."""
    slots = fill(lim)
    lim.tick(queued=0)
    for s in slots:
        s.release(None)


def finish(slots: list[Slot], clock: FakeClock, ttft: float) -> None:
    """Finish requests that were dispatched at the current time, one second later."""
    dispatched = clock.now
    clock.now += 1.0
    for s in slots:
        s.release(Sample(dispatched_at=dispatched, e2e=1.0, ttft=ttft))


class Recorder:
    """An algorithm that holds and keeps every observation (to read what the limiter measured)."""

    name = "recorder"
    respects_kv_ceiling = True

    def __init__(self) -> None:
        self.seen: list[Observation] = []

    def initial_limit(self, floor: int, ceiling: int) -> int:
        return 8

    def update(self, obs: Observation) -> Decision:
        self.seen.append(obs)
        return Decision(obs.limit, Direction.HOLD, "steady")


def test_acquire_until_full_then_refuse() -> None:
    lim, _ = limiter()
    assert lim.limit == 8 and lim.floor == 1 and lim.ceiling == 256
    slots = fill(lim)
    assert lim.inflight == 8 and not lim.has_room()
    with pytest.raises(RuntimeError, match="no room"):
        lim.acquire()
    slots[0].release(None)
    assert lim.has_room() and lim.inflight == 7


def test_tick_raises_limit_when_binding_and_fast() -> None:
    lim, clock = limiter()
    busy(lim)
    slots = fill(lim)
    finish(slots, clock, ttft=0.85)
    d = lim.tick(queued=4)
    assert (d.direction, d.reason, d.limit) == (Direction.UP, "headroom", 9)
    assert lim.limit == 9 and lim.last_change_at == clock.now
    assert lim.has_room()
    assert lim.last_decision is d


def test_tick_holds_without_enough_samples_then_epoch_restarts() -> None:
    lim, clock = limiter("aimd", {"backoff": 0.5}, min_samples=8)
    busy(lim)
    slots = fill(lim)
    finish(slots[:2], clock, ttft=3.0)
    assert lim.tick(queued=0).reason == "insufficient_samples"  # two slow ones could be chance
    finish(slots[2:], clock, ttft=3.0)
    clock.now += 1
    d = lim.tick(queued=0)
    assert (d.reason, d.limit) == ("p90_over_target", 4)  # 8 x 0.5
    # Requests dispatched before the change no longer count...
    assert lim.state()["samples"] == 0
    old = Sample(dispatched_at=clock.now - 0.5, e2e=1.0, ttft=9.0)
    lim.acquire().release(old)
    assert lim.state()["samples"] == 0
    # ...and the next tick waits for fresh evidence instead of cutting again.
    assert lim.tick(queued=0).reason == "insufficient_samples"


def test_the_burst_that_fills_a_quiet_limit_is_not_its_evidence() -> None:
    # Eight requests sent together into a limit that held nothing back for QUIET seconds start
    # together and prefill together: their latency describes the burst, not the limit of 8.
    lim, clock = limiter("aimd", {"backoff": 0.5}, min_samples=8)
    clock.now += QUIET + 1
    assert lim.tick(queued=0).limit == 8  # nothing in flight
    burst_at = clock.now
    slots = fill(lim)
    clock.now += 1
    assert lim.tick(queued=3).limit == 8  # the burst binds: a new epoch from here
    for s in slots:
        s.release(Sample(dispatched_at=burst_at, e2e=2.0, ttft=3.0))
    assert lim.state()["samples"] == 0
    clock.now += 1
    d = lim.tick(queued=3)
    assert (d.reason, d.limit) == ("insufficient_samples", 8)
    # Requests sent since, as slots freed, are the limit's evidence: those cut it.
    slots = fill(lim)
    finish(slots, clock, ttft=3.0)
    d = lim.tick(queued=3)
    assert (d.reason, d.limit) == ("p90_over_target", 4)


def test_the_engine_p90_that_admission_reads_outlives_the_epoch_that_measured_it() -> None:
    # A fresh gateway's first requests measure TTFT, and the burst that fills the limit before its
    # first tick starts an epoch with none measured: the wait budget still reads what they showed.
    lim, clock = limiter()
    assert lim.engine_p90 == {}
    first = [lim.acquire() for _ in range(3)]
    for s in first:
        s.first_token(clock.now, 0.2)
    clock.now += 1.0
    burst = [lim.acquire() for _ in range(lim.limit - len(first))]
    lim.tick(queued=3)  # the burst binds: a new epoch, nothing of it measured
    assert lim.p90() == {} and lim.engine_p90["ttft"] == pytest.approx(0.2)
    for s in first + burst:
        s.release(None)


def test_the_bursts_first_tokens_that_came_before_the_tick_are_not_its_evidence() -> None:
    # Short prompts: the burst's first tokens arrive before the tick that sees the limit full.
    lim, clock = limiter("aimd", {"backoff": 0.5}, min_samples=8)
    burst_at = clock.now
    slots = fill(lim)
    clock.now += 3.0
    for s in slots:
        s.first_token(burst_at, 3.0)
    clock.now += 0.5
    d = lim.tick(queued=3)
    assert (d.reason, d.limit) == ("insufficient_samples", 8)
    assert lim.state()["samples"] == 0
    for s in slots:
        s.release(None)


def test_only_ticks_that_saw_the_limit_idle_make_a_quiet_spell() -> None:
    lim, clock = limiter("aimd", min_samples=8)
    slots = fill(lim)
    clock.now += 1
    lim.tick(queued=3)  # the first time it fills: a new epoch
    finish(slots[:4], clock, ttft=0.2)
    slots = slots[4:] + [lim.acquire() for _ in range(4)]
    clock.now += QUIET + 1  # the next tick comes late (a busy host); the limit bound throughout
    lim.tick(queued=3)
    assert lim.state()["samples"] == 4  # still the limit's evidence
    finish(slots, clock, ttft=0.2)
    for _ in range(3):  # ticks that see it idle for QUIET seconds
        lim.tick(queued=0)
        clock.now += 1
    burst = fill(lim)
    lim.tick(queued=3)
    assert lim.state()["samples"] == 0  # the burst that fills it again starts a new epoch
    for s in burst:
        s.release(None)


def test_an_idle_backend_keeps_its_limit_for_the_next_burst() -> None:
    # The sla algorithm would go back to its initial limit after `idle_restart` seconds idle; the
    # limiter keeps the limit learned, so a burst finds the room the engine gave the last one.
    lim, clock = limiter("sla")
    lim.adopt(20)
    for _ in range(10):
        clock.advance(1.0)
        d = lim.tick(queued=0)
        assert d.reason == "not_binding" and d.direction is Direction.HOLD
    assert lim.limit == 20
    assert len(fill(lim)) == 20


def test_a_burst_after_a_quiet_spell_gets_what_the_kv_cache_holds_whole() -> None:
    lim, clock = limiter("aimd")
    lim.adopt(4)  # the algorithm's limit, moved: no start from the KV cache
    lim.observe(EngineStats(at=clock.now, kv_capacity_tokens=1000))
    lim.acquire().release(Sample(dispatched_at=clock.now, e2e=1.0, prompt_tokens=60, output_tokens=40))
    for _ in range(3):  # quiet: the limit held nothing back
        clock.advance(1.0)
        lim.tick(queued=0)
    assert lim.limit == 10  # 1,000 KV tokens hold 10 requests of 100 tokens whole
    burst = [lim.acquire() for _ in range(10)]
    assert not lim.has_room()
    clock.advance(1.0)
    lim.tick(queued=5)  # the burst filled it: the algorithm's limit rules again
    assert lim.limit < 10
    for slot in burst:
        slot.release(None)
    assert lim.limit < 10 and lim.has_room()


def test_a_fresh_limiter_takes_in_what_requests_say_the_kv_cache_holds_whole() -> None:
    # Nothing has finished yet: the requests' prompt and max_tokens say what they will hold.
    lim, clock = limiter("sla")
    lim.observe(EngineStats(at=clock.now, kv_capacity_tokens=1000))
    assert lim.limit == 8
    first = lim.acquire()
    first.sent(clock.now, None, 100)
    assert lim.limit == 10  # 1,000 KV tokens hold 10 requests of at most 100 tokens
    rest = [lim.acquire() for _ in range(9)]
    assert not lim.has_room()
    first.release(Sample(dispatched_at=clock.now, e2e=1.0, prompt_tokens=20, output_tokens=20))
    for slot in rest:
        slot.release(None)
    lim.tick(queued=0)  # the burst filled the room: the algorithm's limit rules
    assert lim.limit == 8
    for _ in range(3):  # quiet again
        clock.advance(1.0)
        lim.tick(queued=0)
    assert lim.limit == 25  # an answer said what requests hold: 40 tokens each


def test_peak_inflight_resets_each_tick() -> None:
    lim, clock = limiter(min_samples=1)
    busy(lim)
    slots = fill(lim)
    finish(slots, clock, ttft=0.7)
    assert lim.tick(queued=0).direction == Direction.UP  # peak 8 = limit: binding
    lim.acquire().release(Sample(dispatched_at=clock.now, e2e=1.0, ttft=0.7))
    clock.now += 1
    assert lim.tick(queued=0).reason == "not_binding"  # peak 1 since the last tick


def test_preemption_counter_delta() -> None:
    lim, clock = limiter(min_samples=1)
    lim.observe(EngineStats(at=clock.now, preemptions_total=40))
    slots = fill(lim)
    finish(slots, clock, ttft=0.1)
    assert lim.tick(queued=0).reason != "preemptions"  # the first reading is a baseline
    lim.observe(EngineStats(at=clock.now, preemptions_total=43))
    lim.acquire().release(Sample(dispatched_at=clock.now, e2e=1.0, ttft=0.1))
    d = lim.tick(queued=0)
    assert d.reason == "preemptions" and d.detail.startswith("3 ")
    # A restarted backend counts from zero again: its new count is the delta.
    lim.observe(EngineStats(at=clock.now, preemptions_total=2))
    lim.acquire().release(Sample(dispatched_at=clock.now, e2e=1.0, ttft=0.1))
    assert lim.tick(queued=0).detail.startswith("2 ")


def test_backend_histogram_fills_missing_ttft() -> None:
    lim, clock = limiter(min_samples=1)
    slot = lim.acquire()
    clock.now += 2
    slot.release(Sample(dispatched_at=clock.now - 2.0, e2e=2.0))  # non-streaming
    lim.observe(EngineStats(at=clock.now, ttft_p90=2.5))
    assert lim.p90() == {"e2e": 2.0, "ttft": 2.5}
    assert lim.tick(queued=0).reason == "p90_over_target"


def test_kv_ceiling_arithmetic_then_measured_footprint() -> None:
    lim, clock = limiter(min_samples=1)
    lim.observe(EngineStats(at=clock.now, kv_capacity_tokens=8192))
    assert lim.ceiling == 256  # capacity known, footprint not yet
    lim.acquire().release(
        Sample(dispatched_at=clock.now, e2e=1.0, ttft=0.1, prompt_tokens=232, output_tokens=300)
    )
    lim.observe(EngineStats(at=clock.now, kv_capacity_tokens=8192))
    assert lim.kv_ceiling() == 15 and lim.ceiling == 15  # 8192 / 532 = 15.4
    # The backend runs 16 sequences holding half the cache: 256 tokens each, 32 fit.
    lim.observe(EngineStats(at=clock.now, kv_usage=0.5, running=16))
    assert lim.state()["kv_tokens_per_running"] == 256.0 and lim.ceiling == 32


def test_ceiling_drop_lowers_limit_at_once_and_never_below_floor() -> None:
    lim, clock = limiter(params={"initial": 20}, floor=2, min_samples=1)
    assert lim.limit == 20
    lim.observe(EngineStats(at=clock.now, kv_capacity_tokens=1000, kv_usage=1.0, running=1))
    assert lim.ceiling == 2 and lim.limit == 2  # 1000 tokens per sequence: 1 fits; floor 2
    lim.acquire().release(Sample(dispatched_at=clock.now, e2e=1.0, ttft=0.1))
    d = lim.tick(queued=0)
    assert (d.limit, d.direction, d.reason) == (2, Direction.DOWN, "above_ceiling")


def test_fixed_ignores_kv_ceiling() -> None:
    lim, clock = limiter("fixed", {"limit": 24})
    lim.observe(EngineStats(at=clock.now, kv_capacity_tokens=8192, kv_usage=1.0, running=16))
    assert lim.limit == 24 and lim.ceiling == 256


def test_state_is_json_ready() -> None:
    import json

    lim, clock = limiter(min_samples=1)
    lim.observe(EngineStats(at=clock.now, kv_usage=0.4, waiting=0, running=3))
    lim.acquire().release(Sample(dispatched_at=clock.now, e2e=1.0, ttft=0.2, tpot=0.01))
    lim.tick(queued=0)
    state = json.loads(json.dumps(lim.state()))
    assert state["algorithm"] == "aimd" and state["limit"] == 8 and state["inflight"] == 0
    assert state["sla_infeasible"] is False and state["latency_floor"] is None
    assert state["p90"] == {"ttft": 0.2, "tpot": 0.01, "e2e": 1.0}
    assert state["kv_usage"] == 0.4 and state["last_decision"]["reason"] == "not_binding"


def test_state_shows_requests_in_flight_that_the_engine_does_not_count() -> None:
    lim, clock = limiter()
    slots = [lim.acquire() for _ in range(5)]
    lim.observe(EngineStats(at=clock.now, waiting=1, running=2))
    assert lim.state()["outside_engine"] == 2  # 5 in flight, vLLM counts 3
    lim.observe(EngineStats(at=clock.now, waiting=0, running=9))  # others' traffic too
    assert lim.state()["outside_engine"] == 0
    for slot in slots:
        slot.release()


def test_constructor_validation() -> None:
    algo = create("sla", {}, TTFT_1S)
    with pytest.raises(ValueError, match="floor"):
        Limiter(algo, clock=FakeClock(), floor=0)
    with pytest.raises(ValueError, match="max_limit"):
        Limiter(algo, clock=FakeClock(), floor=10, max_limit=5)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.integers(0, 0)),
        st.tuples(st.just("release"), st.integers(0, 1000)),
        st.tuples(st.just("tick"), st.integers(0, 50)),
        st.tuples(st.just("scrape"), st.integers(0, 100)),
        st.tuples(st.just("advance"), st.integers(1, 30)),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(["sla", "aimd", "gradient"]),
    floor=st.integers(1, 4),
    steps=ops,
    latency=st.floats(0.01, 5.0),
)
def test_random_sequences_keep_invariants(
    name: str, floor: int, steps: list[tuple[str, int]], latency: float
) -> None:
    clock = FakeClock(0.0)
    lim = Limiter(create(name, {}, TTFT_1S), clock=clock, floor=floor, max_limit=40, min_samples=2)
    held: list[tuple[Slot, float]] = []
    preemptions = 0.0
    for op, arg in steps:
        if op == "acquire" and lim.has_room():
            held.append((lim.acquire(), clock.now))
        elif op == "release" and held:
            slot, at = held.pop(arg % len(held))
            ttft = latency * (1 + len(held) / 10)
            slot.release(
                Sample(dispatched_at=at, e2e=ttft + 1, ttft=ttft, prompt_tokens=200, output_tokens=50)
            )
        elif op == "tick":
            lim.tick(queued=arg)
        elif op == "scrape":
            preemptions += arg % 3
            lim.observe(
                EngineStats(
                    at=clock.now,
                    kv_usage=arg / 100,
                    running=float(len(held)),
                    waiting=float(arg % 4),
                    preemptions_total=preemptions,
                    kv_capacity_tokens=2000 + 100 * arg,
                )
            )
        else:
            clock.now += arg
        assert lim.inflight == len(held) >= 0
        assert lim.floor <= lim.limit <= lim.ceiling
    for slot, _at in held:
        slot.release(None)
    assert lim.inflight == 0


def test_no_room_until_releases_bring_the_count_under_a_cut() -> None:
    lim, clock = limiter("aimd", {"backoff": 0.5}, min_samples=1)
    busy(lim)
    slots = fill(lim)
    finish(slots[:1], clock, ttft=5.0)
    lim.tick(queued=3)  # 8 -> 4 while 7 are still in flight
    assert lim.limit == 4 and lim.inflight == 7
    for s in slots[1:4]:
        s.release(None)
    assert not lim.has_room() and lim.inflight == 4
    slots[4].release(None)
    assert lim.has_room()


def test_control_uses_newest_samples_but_state_reports_the_window() -> None:
    lim, clock = limiter(min_samples=1, control_samples=4)
    for ttft in (5.0, 5.0, 5.0, 5.0, 0.1, 0.1, 0.1, 0.1):
        lim.acquire().release(Sample(dispatched_at=clock.now, e2e=1.0, ttft=ttft))
    assert lim.p90()["ttft"] == 5.0
    # The newest four say the backend recovered: not a decrease.
    assert lim.tick(queued=0).direction != Direction.DOWN


def test_requests_overdue_for_their_first_token_count_before_any_token_arrives() -> None:
    lim, clock = limiter(sla=SLA(ttft_p90=1.0), min_samples=2)
    busy(lim)
    slots = [lim.acquire() for _ in range(4)]
    for slot in slots:
        slot.sent(clock.now, Progress())
    clock.now += 0.5
    assert "ttft" not in lim.p90()  # not late yet: nothing is known
    clock.now += 2.5
    assert lim.p90()["ttft"] == 3.0  # each has waited 3 s: TTFT is at least that
    decision = lim.tick(queued=5)
    assert decision.direction is Direction.DOWN and decision.reason == "p90_over_target"
    slots[0].first_token(clock.now - 3.0, 3.0)
    for slot in slots:
        slot.release(None)
    assert lim.inflight == 0


def test_whole_answers_far_past_the_e2e_target_cut_the_limit_before_they_end() -> None:
    """Non-streaming requests that ran twice the e2e target have missed it: the sla controller cuts
    on them rather than wait for the answers."""
    clock = FakeClock(100.0)
    sla = SLA(e2e_p90=1.0)
    lim = Limiter(create("sla", {}, sla), clock=clock, min_samples=20, sla=sla)
    busy(lim)
    slots = fill(lim)
    for slot in slots:
        slot.sent(clock.now)
    clock.now += 2.5
    decision = lim.tick(queued=5)
    assert decision.reason == "p90_over_target" and decision.limit == lim.limit < len(slots)
    for slot in slots:
        slot.release(None)
    assert lim.inflight == 0


def test_whole_answers_far_under_the_e2e_target_grow_the_limit_once_the_first_sent_are_back() -> None:
    """Eight answers of a second against a 10-s target grow the limit before 20 have come, but only
    once every one sent first has finished: one still running could be the slow one."""
    clock = FakeClock(100.0)
    sla = SLA(e2e_p90=10.0)
    lim = Limiter(create("sla", {}, sla), clock=clock, min_samples=20, sla=sla)
    busy(lim)
    clock.now += 3.0
    slots = fill(lim)
    sent = clock.now
    for slot in slots:
        slot.sent(sent)
    clock.now += 1.0
    for slot in slots[:-1]:
        slot.release(Sample(dispatched_at=sent, e2e=1.0, output_tokens=50))
    assert lim.tick(queued=5).direction == Direction.HOLD
    slots[-1].release(Sample(dispatched_at=sent, e2e=1.0, output_tokens=50))
    refill = fill(lim)
    clock.now += 1.0
    decision = lim.tick(queued=5)
    assert decision.reason == "probe" and decision.limit > len(slots)
    for slot in refill:
        slot.release(None)
    assert lim.inflight == 0


def test_signals_are_counted_separately_for_the_algorithm() -> None:
    """A TTFT counts at the first token, the TPOT only when the request ends: counts say which."""
    clock = FakeClock(100.0)
    algo = Recorder()
    lim = Limiter(algo, clock=clock, min_samples=4)
    slots = fill(lim)
    for s in slots:
        s.first_token(clock.now, 0.2)
    for s in slots[:3]:
        s.release(Sample(dispatched_at=clock.now, e2e=1.0, ttft=0.2, tpot=0.02))
    lim.tick(queued=0)
    # Each TTFT once: at the first token, not again in the finished sample.
    assert algo.seen[-1].counts == {"ttft": 8, "tpot": 3, "e2e": 3}
    assert algo.seen[-1].p90["ttft"] == 0.2


def tpot_limiter(**kw: object) -> tuple[Limiter, FakeClock]:
    clock = FakeClock(100.0)
    algo = create("sla", {}, SLA(tpot_p90=0.03))
    return Limiter(algo, clock=clock, min_samples=8, **kw), clock  # type: ignore[arg-type]


def stream(slot: Slot, dispatched: float, gap: float, events: int) -> Progress:
    """A stream whose first token came 0.1 s after dispatch, then one event every `gap` seconds."""
    first = dispatched + 0.1
    progress = Progress(first, first + gap * (events - 1), events)
    slot.sent(dispatched, progress)
    return progress


def one_token_an_event(lim: Limiter, clock: FakeClock) -> None:
    """A stream finishes whose `usage` counts as many tokens as it had events (it has no TPOT)."""
    slot = lim.acquire()
    stream(slot, clock.now, 0.06, 20)
    slot.release(Sample(dispatched_at=clock.now, e2e=1.2, output_tokens=20))


def test_the_pace_of_streams_in_flight_counts_as_tpot_before_any_finishes() -> None:
    """A backend that slowed down is seen at the next tick, not when the slowed requests end."""
    lim, clock = tpot_limiter()
    one_token_an_event(lim, clock)
    busy(lim)
    slots = fill(lim)
    start = clock.now
    for slot in slots:
        stream(slot, start, 0.06, 20)
    clock.now = start + 0.1 + 0.06 * 19 + 0.01
    assert lim.p90()["tpot"] == pytest.approx(0.06)
    decision = lim.tick(queued=10)
    assert decision.direction is Direction.DOWN and decision.reason == "p90_over_target"
    assert decision.limit == 4  # twice the target: halved
    for slot in slots:
        slot.release(None)
    assert lim.inflight == 0


def test_streams_dispatched_before_the_last_change_do_not_count() -> None:
    lim, clock = tpot_limiter()
    one_token_an_event(lim, clock)
    busy(lim)
    old = [lim.acquire() for _ in range(4)]
    for slot in old:
        stream(slot, clock.now, 0.06, 20)
    clock.now += 1.0
    for s in [lim.acquire() for _ in range(lim.limit - 4)]:
        s.release(Sample(dispatched_at=clock.now, e2e=1.0, tpot=0.01))
    assert lim.p90()["tpot"] == pytest.approx(0.06)  # four slow streams of eight values
    assert lim.tick(queued=5).direction is Direction.DOWN
    assert lim.p90()["tpot"] == 0.01  # they were sent before the change: they no longer count
    for slot in old:
        slot.release(None)


def test_delivered_tokens_count_stream_progress_once_and_finished_requests_rest() -> None:
    clock = FakeClock(100.0)
    algo = Recorder()
    lim = Limiter(algo, clock=clock)
    streaming, whole = lim.acquire(), lim.acquire()
    progress = Progress(first_at=100.1, last_at=100.5, events=40)
    streaming.sent(100.0, progress)
    clock.now = 101.0
    lim.tick(queued=0)
    progress.events = 70
    streaming.release(Sample(dispatched_at=100.0, e2e=1.5, ttft=0.1, output_tokens=100))
    whole.release(Sample(dispatched_at=100.0, e2e=1.5, output_tokens=25))
    clock.now = 103.0
    lim.tick(queued=0)
    assert [(o.delivered_tokens, o.interval) for o in algo.seen] == [(40.0, 1.0), (85.0, 2.0)]


def test_the_backends_own_count_of_its_output_stands_for_whole_answers_when_only_ours_run() -> None:
    clock = FakeClock(100.0)
    algo = Recorder()
    lim = Limiter(algo, clock=clock)
    slots = [lim.acquire() for _ in range(4)]
    slots[0].release(Sample(dispatched_at=100.0, e2e=0.5, output_tokens=300))  # one whole answer

    def tick(running: float, waiting: float, at: float) -> Observation:
        lim.observe(EngineStats(at=at, running=running, waiting=waiting, generation_rate=250.0))
        clock.now += 2.0
        lim.tick(queued=0)
        return algo.seen[-1]

    mine = tick(running=3, waiting=0, at=clock.now + 1.5)
    assert (mine.delivered_tokens, mine.lumped_tokens, mine.finished) == (500.0, 0.0, 1)
    # The backend counts more requests than the gateway has in flight: others' traffic is in its count.
    others = tick(running=3, waiting=4, at=clock.now + 1.5)
    assert (others.delivered_tokens, others.lumped_tokens) == (0.0, 0.0)
    slots[1].release(Sample(dispatched_at=100.0, e2e=0.5, output_tokens=120))
    stale = tick(running=2, waiting=0, at=clock.now - 5.0)  # a scrape from before the last tick
    assert (stale.delivered_tokens, stale.lumped_tokens) == (120.0, 120.0)
    for slot in slots[2:]:
        slot.release(None)


def test_state_shows_the_tokens_a_stream_event_carries() -> None:
    lim, clock = limiter()
    assert lim.state()["tokens_per_event"] is None  # no stream has finished
    slot = lim.acquire()
    slot.sent(clock.now, Progress(first_at=clock.now, last_at=clock.now + 1.0, events=40))
    slot.release(Sample(dispatched_at=clock.now, e2e=1.0, ttft=0.0, tpot=0.01, output_tokens=100))
    assert lim.state()["tokens_per_event"] == 2.5  # 100 tokens from `usage` in 40 events


def test_other_processes_samples_and_shared_inflight_decide_the_leaders_tick() -> None:
    lim, clock = limiter(min_samples=4)
    lim.tick(queued=0, shared_inflight=8)  # the first time the backend is full: a new epoch
    clock.now += 1
    for _ in range(8):  # finished elsewhere: this process served none of them
        lim.record(Sample(dispatched_at=clock.now - 0.5, e2e=0.5, ttft=0.5))
    assert lim.inflight == 0 and lim.state()["samples"] == 8
    d = lim.tick(queued=0, shared_inflight=8)  # the backend is full across processes: binding
    assert (d.direction, d.limit) == (Direction.UP, 9)
    clock.now += 1
    for _ in range(8):
        lim.record(Sample(dispatched_at=clock.now - 0.5, e2e=0.5, ttft=0.5))
    assert lim.tick(queued=0).reason == "not_binding"  # this process alone holds nothing


def test_a_follower_adopts_the_leaders_limit_within_its_bounds() -> None:
    lim, clock = limiter(max_limit=20)
    samples = [Sample(dispatched_at=clock.now, e2e=0.5)]
    lim.on_sample = samples.append
    lim.acquire().release(Sample(dispatched_at=clock.now, e2e=1.0, ttft=0.2))
    assert len(samples) == 2  # each finished request is handed on for the leader
    lim.adopt(12)
    assert lim.limit == 12 and lim.has_room() and lim.last_change_at == clock.now
    lim.adopt(500)
    assert lim.limit == 20
    lim.adopt(0)
    assert lim.limit == 1
