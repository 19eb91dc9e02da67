"""Capacity steps in virtual time: the simulated engine slows to half its speed at one moment and
comes back 60 s later, and the adaptive controller must follow both within 15 s.
Each run also gives how long the limit took to settle from the cold start, after the slowdown and
after the restore: the time from the phase's start after which every limit to its end stays within
1.25x of the phase's final limit (the median of its second half).

Per step time t: 80 closed-loop streaming clients (prompts of 250-270 tokens, 300 output tokens)
against the simulated engine, SLA TTFT P90 1 s and TPOT P90 0.015 s, which at full speed a limit
of 11 meets and at half speed 5 (6 misses by 6%). At GPU time scale (`--profile llama3-8b-h100`) the
same shape with 512 clients and a TPOT target of 20 ms: the batch of 256 at full speed, about 48 at
half speed. Followed means both:

    TPOT P90 of requests that finished in [t + 15, t + 60)  <=  1.1 x target
    throughput in [t + 75, t + 120)  >=  0.9 x throughput in [t - 20, t)

Why many step times: where the step falls against the controller's own cycle (a probe being
measured, a cut not yet in force) decides how it is followed, and one time tells little.

    python -m loadtests.controller.capacity_steps [--algorithm sla] [--params JSON]
        [--first 40] [--last 90] [--every 2.5] [--server clean|busy-host] [--profile llama3-8b-h100]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.control.algorithms import create
from gateway.sim.profiles import Profile
from gateway.types import SLA
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


@dataclass(frozen=True, slots=True)
class Step:
    at: float
    tpot_ratio: float
    """TPOT P90 / target from WITHIN seconds after the slowdown to the restore."""
    tput_share: float
    """Throughput from WITHIN seconds after the restore, as a share of before the slowdown."""
    settled: tuple[float, float, float]
    """Seconds to settle from the cold start, after the slowdown and after the restore."""
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


def step(
    at: float,
    algorithm: str = "sla",
    params: Mapping[str, object] | None = None,
    profile: Profile | None = None,
) -> Step:
    """Halve capacity at `at`, restore it RESTORED_AFTER later, and measure how both were followed."""
    gpu = profile is not None and profile.name == GPU
    workload, targets = (GPU_LONG_OUTPUT, GPU_TARGETS) if gpu else (LONG_OUTPUT, TARGETS)
    restore = at + RESTORED_AFTER
    scenario = Scenario(slowdowns=[(at, SLOWER), (restore, 1.0)])
    run = simulate(
        workload,
        create(algorithm, dict(params or {}), targets),
        targets,
        duration=restore + RESTORED_AFTER,
        scenario=scenario,
        profile=profile,
    )
    assert targets.tpot_p90 is not None
    end = restore + RESTORED_AFTER
    return Step(
        at,
        tpot_p90(run, at + WITHIN, restore) / targets.tpot_p90,
        throughput(run, restore + WITHIN, end) / throughput(run, at - 20.0, at),
        (settle_time(run, 0.0, at), settle_time(run, at, restore), settle_time(run, restore, end)),
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
    args = parser.parse_args(argv)
    profile = server_profile(args.server, args.profile)
    started = time.perf_counter()
    times = [args.first + i * args.every for i in range(int((args.last - args.first) / args.every) + 1)]
    steps = [step(t, args.algorithm, args.params, profile) for t in times]
    print(
        "| halved at (s) | TPOT P90 / target after 15 s | throughput after the restore "
        "| settled (s): cold, halved, restored | followed |"
    )
    print("|---:|---:|---:|---|---|")
    for s in steps:
        settled = ", ".join(f"{v:.0f}" for v in s.settled)
        followed = "yes" if s.followed else "**no**"
        print(f"| {s.at:g} | {s.tpot_ratio:.2f} | {s.tput_share:.2f} | {settled} | {followed} |")
    followed = sum(s.followed for s in steps)
    print(
        f"\n{followed} of {len(steps)} steps followed ({args.server}, {time.perf_counter() - started:.0f}s)"
    )


if __name__ == "__main__":
    main()
