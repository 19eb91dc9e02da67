"""The SLA controller in a closed loop against the simulated vLLM engine and its front end, in
virtual time (loadtests/controller/sim_loop.py): the failures a real engine on a busy host showed,
and settling. Deterministic and fast, so the claims are about behaviour, not timing.
"""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from gateway.control.algorithms import create
from gateway.control.window import nearest_rank
from gateway.sim.profiles import get_profile
from gateway.types import SLA
from loadtests.controller.capacity_steps import LONG_OUTPUT, step, throughput, tpot_p90
from loadtests.controller.matrix import WORKLOADS
from loadtests.controller.sim_loop import Run, Scenario, simulate

# The real-engine runs: 80 closed-loop streaming clients, prompts of about 260 tokens, 300 output
# tokens (LONG_OUTPUT), TTFT P90 1 s and TPOT P90 0.2 s.
SLOW_FRONT = SLA(ttft_p90=1.0, tpot_p90=0.2)
ENGINE = get_profile("tiny-cpu-4l")
CHAT_SHORT = WORKLOADS[0]


def limits(run: Run, start: float, end: float) -> list[int]:
    return [t.limit for t in run.ticks if start <= t.at < end]


def test_latency_floor_outside_the_engine_is_reported_not_chased() -> None:
    # From t = 30 s the front end holds every request 1.2 s before the engine sees it: the TTFT
    # target of 1 s cannot be met at any limit.
    scenario = Scenario(holds=[(30.0, 1.2)])
    direct = simulate(LONG_OUTPUT, None, SLOW_FRONT, duration=120.0, scenario=scenario)
    run = simulate(LONG_OUTPUT, create("sla", {}, SLOW_FRONT), SLOW_FRONT, duration=120.0, scenario=scenario)
    assert throughput(run, 60.0, 120.0) >= 0.8 * throughput(direct, 60.0, 120.0)
    # Cuts lead down to where the floor is proven, within 40 s; once reported it is not chased.
    reported = next(t.at for t in run.ticks if t.reason == "sla_infeasible")
    assert reported <= 70.0
    assert min(limits(run, reported, 120.0)) > 2
    state = run.states[-1]
    assert state["sla_infeasible"] is True
    floor = state["latency_floor"]
    assert isinstance(floor, dict) and floor["ttft"] >= 1.0


def test_a_front_end_stall_that_passes_leaves_no_latency_floor_behind() -> None:
    # From 3 s to 11 s the front end holds every request 1 s before the engine sees it, as the real
    # engine's front end stalled a fresh gateway's first requests on a busy host: 8, and then 4,
    # read TTFT over target, a floor proven along the limit. Once the front end holds nothing, that
    # floor is outlived and the limit goes back to where the SLA is met.
    sla = SLA(ttft_p90=0.32, tpot_p90=0.015)
    scenario = Scenario(holds=[(3.0, 1.0), (11.0, 0.0)])
    run = simulate(CHAT_SHORT, create("sla", {}, sla), sla, duration=120.0, scenario=scenario)
    late = [d for d in run.done if d.finished_at >= 60.0]
    ttft = nearest_rank(sorted(d.ttft for d in late if d.ttft is not None), 0.9)
    assert ttft is not None and ttft <= 1.1 * 0.32
    assert tpot_p90(run, 60.0, 120.0) <= 1.1 * 0.015
    assert run.states[-1]["sla_infeasible"] is False


def test_a_front_end_that_stalls_again_and_again_does_not_starve_the_engine() -> None:
    # Every 2 s the front end hands nothing to the engine for 0.4 s, as a CPU-starved host
    # deschedules vLLM's API server: every request sent in that time waits for its end. A fifth
    # of the requests wait, at any limit, so no limit meets a TTFT P90 of 0.2 s (a fixed 1 to 32
    # reads 0.26-0.38 s) and the window P90 swings across the target from one reading to the next.
    sla = SLA(ttft_p90=0.2, tpot_p90=0.05)
    scenario = Scenario(stalls=(2.0, 0.4))
    direct = simulate(CHAT_SHORT, None, sla, duration=120.0, scenario=scenario)
    run = simulate(CHAT_SHORT, create("sla", {}, sla), sla, duration=120.0, scenario=scenario)
    assert throughput(run, 40.0, 120.0) >= 0.9 * throughput(direct, 40.0, 120.0)


def test_climbs_past_kv_saturation_while_throughput_rises() -> None:
    # Requests held 1 s outside the engine: the engine fills only when the gateway admits more than
    # the KV cache holds (8,192 tokens / 560 per request = 14.6), and throughput rises up to ~24.
    profile = dataclasses.replace(get_profile("tiny-cpu"), frontend_overhead=1.0, stream_burst=4)
    sla = SLA(ttft_p90=5.0, tpot_p90=0.2)
    best = max(
        throughput(
            simulate(LONG_OUTPUT, create("fixed", {"limit": n}, sla), sla, duration=120.0, profile=profile),
            40.0,
            120.0,
        )
        for n in (16, 24, 32)
    )
    run = simulate(LONG_OUTPUT, create("sla", {}, sla), sla, duration=120.0, profile=profile)
    assert throughput(run, 40.0, 120.0) >= 0.95 * best
    assert statistics.mean(limits(run, 40.0, 120.0)) > 20
    # The gateway holds requests the engine does not count (running + waiting).
    gaps = [t.inflight - t.engine_count for t in run.ticks if t.at >= 40.0]
    assert statistics.mean(gaps) >= 3


def test_tokens_merged_into_one_event_are_not_read_as_slow_tokens() -> None:
    # The front end sends a stream's tokens four to an event, as vLLM merges the deltas its reader
    # has not taken yet. Throughput peaks at 13 (the KV cache is full), and the TPOT target is
    # a quarter over what 13 gives: a pace per event would read TPOT four times too slow there and
    # cut the limit far below it.
    profile = dataclasses.replace(ENGINE, stream_burst=4)
    loose = SLA(ttft_p90=30.0)
    knee = simulate(LONG_OUTPUT, create("fixed", {"limit": 13}, loose), loose, duration=90.0, profile=profile)
    target = 1.25 * tpot_p90(knee, 40.0, 90.0)
    sla = SLA(ttft_p90=30.0, tpot_p90=target)
    run = simulate(LONG_OUTPUT, create("sla", {}, sla), sla, duration=90.0, profile=profile)
    assert throughput(run, 40.0, 90.0) >= 0.95 * throughput(knee, 40.0, 90.0)
    assert tpot_p90(run, 40.0, 90.0) <= target


def goodput(run: Run, sla: SLA, start: float, end: float) -> float:
    """Output tokens/s of the requests that finished in [start, end) within every target."""
    targets = sla.targets().items()
    met = [d for d in run.done if start <= d.finished_at < end]
    good = [d for d in met if all((v := getattr(d, s)) is None or v <= t for s, t in targets)]
    return sum(d.output_tokens for d in good) / (end - start)


def test_goodput_is_won_where_the_longest_answers_miss_first() -> None:
    # Non-streaming answers of 16-400 tokens against an e2e P90 of 5.2 s (the matrix's tight level):
    # at 12-13 the P90 reads 0.8-0.9x its target, yet the answers that miss are the longest, a
    # fifth to a half of the output; at 8 none miss. Growing to the band lost a fifth of the goodput.
    mixed = next(w for w in WORKLOADS if w.name == "chat-nonstream-mixed")
    sla = SLA(e2e_p90=5.2)
    fixed = simulate(mixed, create("fixed", {"limit": 8}, sla), sla, duration=120.0, profile=ENGINE)
    run = simulate(mixed, create("sla", {}, sla), sla, duration=120.0, profile=ENGINE)
    assert goodput(run, sla, 30.0, 120.0) >= 0.9 * goodput(fixed, sla, 30.0, 120.0)


def test_idle_gateway_does_not_move_on_traffic_it_did_not_send() -> None:
    # The gateway's eight clients stop at 25 s; from 40 s others load the engine directly.
    scenario = Scenario(bypass=[(40.0, 90.0, 80)], gateway_until=25.0)
    algorithm = create("sla", {}, SLOW_FRONT)
    run = simulate(LONG_OUTPUT, algorithm, SLOW_FRONT, duration=90.0, scenario=scenario, clients=8)
    idle = [t for t in run.ticks if t.at >= 40.0]
    quiet_from = next(i for i, t in enumerate(idle) if t.inflight == 0)
    assert len({t.limit for t in idle[quiet_from:]}) == 1


def test_traffic_bypassing_the_gateway_does_not_drive_it_to_its_floor() -> None:
    # Eight clients go through the gateway while sixty load the engine directly.
    scenario = Scenario(bypass=[(20.0, 120.0, 60)])
    direct = simulate(LONG_OUTPUT, None, SLOW_FRONT, duration=120.0, scenario=scenario, clients=8)
    run = simulate(
        LONG_OUTPUT, create("sla", {}, SLOW_FRONT), SLOW_FRONT, duration=120.0, scenario=scenario, clients=8
    )
    assert min(limits(run, 60.0, 120.0)) > 1
    assert throughput(run, 40.0, 120.0) >= 0.8 * throughput(direct, 40.0, 120.0)


def test_limit_settles_in_steady_load() -> None:
    sla = SLA(ttft_p90=2.0, tpot_p90=0.05)
    run = simulate(LONG_OUTPUT, create("sla", {}, sla), sla, duration=150.0)
    steady = limits(run, 60.0, 150.0)
    mean = statistics.mean(steady)
    assert max(abs(n - mean) for n in steady) < 0.15 * mean


@pytest.mark.parametrize("at", [45.0, 55.0, 60.0, 75.0])
def test_capacity_steps_are_followed_within_15_seconds(at: float) -> None:
    # At half capacity 5 meets the TPOT target and 6 misses it by 6%: a cut that read the requests
    # still in flight from before it as the lower limit's, or a higher limit measured before the
    # slowdown, took 5 for a latency floor (loadtests.controller.capacity_steps).
    result = step(at)
    assert result.tpot_ratio <= 1.1 and result.tput_share >= 0.9


@pytest.mark.parametrize("declare", [True, False])
def test_a_fresh_gateway_under_open_loop_arrivals_serves_its_first_seconds_in_time(declare: bool) -> None:
    # vLLM's own benchmark client against a CPU engine: 200-token prompts, 120 output tokens,
    # Poisson arrivals at 0.9x what the engine serves, TTFT P90 1.5 s and TPOT P90 0.15 s. At a
    # fresh gateway's limit of 8 an answer takes 4 s, and waiting for answers before the first raise
    # held 8 for 14 s while arrivals queued. Requests that say their max_tokens are taken in at once
    # as far as the KV cache holds them whole; where they do not, the first 8 are a burst whose
    # streams, at a fifth of the targets, let the limit rise once it has settled.
    engine = dataclasses.replace(ENGINE, step_base=0.025)
    bench = dataclasses.replace(CHAT_SHORT, prompt_tokens=(200, 200), output_tokens=(120, 120), clients=32)
    sla = SLA(ttft_p90=1.5, tpot_p90=0.15)
    direct = simulate(bench, None, sla, duration=60.0, profile=engine)
    capacity = sum(1 for d in direct.done if d.finished_at >= 10.0) / 50.0
    answer = statistics.median(
        d.e2e for d in simulate(bench, None, sla, duration=20.0, profile=engine, clients=8).done
    )
    assert answer >= 3.5  # the slow answers this is about
    for seed in range(3):
        run = simulate(
            bench,
            create("sla", {}, sla),
            sla,
            duration=30.0,
            profile=engine,
            clients=0,
            scenario=Scenario(arrivals=0.9 * capacity),
            interval=0.5,
            seed=seed,
            declare=declare,
        )
        first_raise = next(t.at for t in run.ticks if t.limit > 8)
        # Declared: once a scrape has said how large the KV cache is (ticks of 0.5 s).
        assert first_raise <= (1.5 if declare else 1.5 * answer)
        late = [d for d in run.done if d.queued + (d.ttft or 0.0) > sla.ttft_p90]
        assert len(late) <= 0.1 * len(run.done)
