"""Capacity steps in virtual time: the simulated engine slows to half its speed at one moment and
comes back 60 s later, and the adaptive controller must follow both within 15 s.
Each run also gives how long the limit took to settle from the cold start, after the slowdown and
after the restore: the time from the phase's start after which every limit to its end stays within
1.25x of the phase's final limit (the median of its second half).

Per step time t: 80 closed-loop streaming clients (prompts of 250-270 tokens, 300 output tokens)
against the simulated engine, SLA TTFT P90 1 s and TPOT P90 0.015 s, which at full speed a limit
of 11 meets and at half speed 5 (6 misses by 6%). At GPU time scale (`--profile llama3-8b-h100`) the
same shape with 512 clients and a TPOT target of 20 ms: near the batch of 256 at full speed, under
a third of it at half speed (TPOT's fixed part doubles too). Followed means both:

    TPOT P90 of requests that finished in [t + 15, t + 60)  <=  1.1 x target
    throughput in [t + 75, t + 120)  >=  0.9 x throughput in [t - 20, t)

Why many step times: where the step falls against the controller's own cycle (a probe being
measured, a cut not yet in force) decides how it is followed, and one time tells little.

`--oracle` runs, instead of a controller, a clairvoyant fixed limit at the first step time: the best
fixed limit at full speed (of loadtests.controller.oracle's dense grid, the most output tokens/s
with TPOT P90 within its slack), the best at half speed from D seconds after the halving until the
restore, then the first again. It says what the target asks of a controller: how deep a cut, how
soon, and what throughput the SLA leaves at half speed.

    python -m loadtests.controller.capacity_steps [--algorithm sla] [--params JSON]
        [--first 40] [--last 90] [--every 2.5] [--server clean|busy-host] [--profile llama3-8b-h100]
        [--oracle]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.control.algorithms import LimitAlgorithm, create
from gateway.control.algorithms.base import clamp, decide
from gateway.control.algorithms.fixed import FixedLimit
from gateway.sim.profiles import Profile
from gateway.types import SLA, Decision, Observation
from loadtests.controller import oracle
from loadtests.controller.matrix import Workload
from loadtests.controller.sim_loop import Run, Scenario, simulate
from loadtests.controller.sim_matrix import SERVERS, server_profile

LONG_OUTPUT = Workload("long-output", "chat", True, (250, 270), (300, 300), clients=80)
TARGETS = SLA(ttft_p90=1.0, tpot_p90=0.015)
GPU = "llama3-8b-h100"
GPU_LONG_OUTPUT = Workload("long-output-512", "chat", True, (250, 270), (300, 300), clients=512)
GPU_TARGETS = SLA(ttft_p90=1.0, tpot_p90=0.020)
SETTLED_WITHIN = 1.25
SLOWER, RESTORED_AFTER = 2.0, 60.0
WITHIN, TPOT_SLACK, TPUT_SHARE = 15.0, 1.1, 0.9
ORACLE_DELAYS = (0.0, 4.0, 8.0, 12.0)
"""Seconds after the halving at which the clairvoyant fixed limit cuts."""
STEADY = 30.0
"""Virtual seconds a fixed limit of the oracle's sweep runs; measured over the second half."""


@dataclass(frozen=True, slots=True)
class Step:
    at: float
    tpot_ratio: float
    """TPOT P90 / target from WITHIN seconds after the slowdown to the restore."""
    tput_share: float
    """Throughput from WITHIN seconds after the restore, as a share of before the slowdown."""
    settled: tuple[float, float, float]
    """Seconds to settle from the cold start, after the slowdown and after the restore."""
    slow_share: float
    """Throughput from WITHIN seconds after the slowdown to the restore, as a share of before."""
    tpot_slack: float = TPOT_SLACK

    @property
    def followed(self) -> bool:
        return self.tpot_ratio <= self.tpot_slack and self.tput_share >= TPUT_SHARE


def throughput(run: Run, start: float, end: float) -> float:
    return sum(d.output_tokens for d in run.done if start <= d.finished_at < end) / (end - start)


def tpot_p90(run: Run, start: float, end: float) -> float:
    values = sorted(d.tpot for d in run.done if start <= d.finished_at < end and d.tpot is not None)
    return values[int(0.9 * len(values))]


def settle_time(run: Run, start: float, end: float) -> float:
    """Seconds from `start` after which every limit before `end` is within SETTLED_WITHIN of the
    median limit of the phase's second half."""
    ticks = [t for t in run.ticks if start <= t.at < end]
    final = sorted(t.limit for t in ticks if t.at >= (start + end) / 2)[len(ticks) // 4]
    settled = start
    for t in ticks:
        if not final / SETTLED_WITHIN <= t.limit <= final * SETTLED_WITHIN:
            settled = t.at
    return settled - start


class Scheduled:
    """A fixed limit that knows the future: `high`, then `low` from `cut_at` until `restore_at`."""

    name = "scheduled"
    respects_kv_ceiling = False

    def __init__(self, high: int, low: int, cut_at: float, restore_at: float) -> None:
        self.high, self.low, self.cut_at, self.restore_at = high, low, cut_at, restore_at

    def initial_limit(self, floor: int, ceiling: int) -> int:
        return clamp(self.high, floor, ceiling)

    def limit_at(self, now: float) -> int:
        return self.low if self.cut_at <= now < self.restore_at else self.high

    def update(self, obs: Observation) -> Decision:
        limit = self.limit_at(obs.now)
        return decide(obs, limit, "fixed", f"scheduled limit {limit}")


def _setting(profile: Profile | None) -> tuple[Workload, SLA]:
    gpu = profile is not None and profile.name == GPU
    return (GPU_LONG_OUTPUT, GPU_TARGETS) if gpu else (LONG_OUTPUT, TARGETS)


def best_fixed(profile: Profile, slower: float) -> int:
    """The fixed limit of the dense grid with the most output tokens/s whose TPOT P90 is within the
    slack, with the engine `slower` times slower (the lowest limit if none is)."""
    workload, targets = _setting(profile)
    assert targets.tpot_p90 is not None
    scenario = Scenario(slowdowns=[(0.0, slower)])
    best, best_tput = 1, -1.0
    for limit in oracle.grid(workload, profile):
        fixed = FixedLimit(limit)
        run = simulate(workload, fixed, targets, duration=STEADY, scenario=scenario, profile=profile)
        half = STEADY / 2
        tput = throughput(run, half, STEADY)
        if tpot_p90(run, half, STEADY) <= oracle.SLACK * targets.tpot_p90 and tput > best_tput:
            best, best_tput = limit, tput
    return best


def step(
    at: float,
    algorithm: str = "sla",
    params: Mapping[str, object] | None = None,
    profile: Profile | None = None,
    *,
    controller: LimitAlgorithm | None = None,
) -> Step:
    """Halve capacity at `at`, restore it RESTORED_AFTER later, and measure how both were followed
    (by `controller` if given, else a new `algorithm` with `params`)."""
    workload, targets = _setting(profile)
    restore = at + RESTORED_AFTER
    scenario = Scenario(slowdowns=[(at, SLOWER), (restore, 1.0)])
    run = simulate(
        workload,
        controller or create(algorithm, dict(params or {}), targets),
        targets,
        duration=restore + RESTORED_AFTER,
        scenario=scenario,
        profile=profile,
    )
    assert targets.tpot_p90 is not None
    end = restore + RESTORED_AFTER
    before = throughput(run, at - 20.0, at)
    return Step(
        at,
        tpot_p90(run, at + WITHIN, restore) / targets.tpot_p90,
        throughput(run, restore + WITHIN, end) / before,
        (settle_time(run, 0.0, at), settle_time(run, at, restore), settle_time(run, restore, end)),
        throughput(run, at + WITHIN, restore) / before,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--algorithm", default="sla")
    parser.add_argument("--params", type=json.loads, default={}, help="the algorithm's parameters (JSON)")
    parser.add_argument("--first", type=float, default=40.0)
    parser.add_argument("--last", type=float, default=90.0)
    parser.add_argument("--every", type=float, default=2.5)
    parser.add_argument("--server", choices=sorted(SERVERS), default="clean")
    parser.add_argument("--profile", default="tiny-cpu-4l")
    parser.add_argument("--oracle", action="store_true", help="a clairvoyant fixed limit, not a controller")
    args = parser.parse_args(argv)
    profile = server_profile(args.server, args.profile)
    started = time.perf_counter()
    if args.oracle:
        print_oracle(profile, args.first, args.server, started)
        return
    times = [args.first + i * args.every for i in range(int((args.last - args.first) / args.every) + 1)]
    steps = [step(t, args.algorithm, args.params, profile) for t in times]
    print(
        "| halved at (s) | TPOT P90 / target after 15 s | throughput after the restore "
        "| throughput at half speed | settled (s): cold, halved, restored | followed |"
    )
    print("|---:|---:|---:|---:|---|---|")
    for s in steps:
        settled = ", ".join(f"{v:.0f}" for v in s.settled)
        verdict = "yes" if s.followed else "**no**"
        print(
            f"| {s.at:g} | {s.tpot_ratio:.2f} | {s.tput_share:.2f} | {s.slow_share:.2f} "
            f"| {settled} | {verdict} |"
        )
    followed = sum(s.followed for s in steps)
    print(
        f"\n{followed} of {len(steps)} steps followed ({args.server}, {time.perf_counter() - started:.0f}s)"
    )


def print_oracle(profile: Profile, at: float, server: str, started: float) -> None:
    high, low = best_fixed(profile, 1.0), best_fixed(profile, SLOWER)
    print(f"best fixed limit: {high} at full speed, {low} at half speed")
    print(
        "| halved at (s) | limit cut to | cut after (s) | TPOT P90 / target after 15 s "
        "| throughput after the restore | throughput at half speed | followed |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|")
    followed = 0
    for delay in ORACLE_DELAYS:
        schedule = Scheduled(high, low, at + delay, at + RESTORED_AFTER)
        s = step(at, profile=profile, controller=schedule)
        followed += s.followed
        verdict = "yes" if s.followed else "**no**"
        print(
            f"| {at:g} | {low} | {delay:g} | {s.tpot_ratio:.2f} | {s.tput_share:.2f} "
            f"| {s.slow_share:.2f} | {verdict} |"
        )
    seconds = time.perf_counter() - started
    print(f"\n{followed} of {len(ORACLE_DELAYS)} schedules followed ({server}, {seconds:.0f}s)")


if __name__ == "__main__":
    main()
