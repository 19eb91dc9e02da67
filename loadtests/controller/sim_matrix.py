"""The controller evaluation matrix (loadtests/controller/matrix.py) on the simulated engine, in
virtual time: per cell, direct, the dense fixed-limit sweep (loadtests.controller.oracle) and the
adaptive controllers, each repeated over `--seeds`, and the targets.

Per workload the unloaded P90s are measured first (one client, straight to the server), then
direct (every client straight to the server) gives the loaded P90s after `--settle`; the SLA
levels are set from both (loadtests.controller.matrix), and every mode runs the same closed loop
(`clients` of the workload) for `--duration` virtual seconds and is judged on requests that
finished after `--settle`.
Throughput is output tokens/s; goodput counts only requests that met every target.
Targets per cell: adaptive throughput >= 90% of direct (unless no fixed limit that meets the SLA
gets 90% of direct: then meeting the SLA costs throughput and goodput decides); where some fixed
limit meets the SLA (every P90 within 10% of its target, for fixed and adaptive alike), adaptive
goodput >= 95% of the best such limit's at the median over the seeds and >= 85% in the worst; where
none does, `sla_infeasible` reported and throughput >= 90% of direct. The summary gives, per cell
and controller, goodput over the best fixed limit's, median and worst over the seeds.

    python -m loadtests.controller.sim_matrix [--server clean|busy-host] [--algorithms sla aimd]
        [--params '{"alpha": 0.05}'] [--workloads a b] [--workload SPEC] [--profile llama3-8b-h100]
        [--seeds 3] [--duration 120] [--settle 40]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.control.algorithms import create
from gateway.control.window import nearest_rank
from gateway.sim.profiles import Profile, get_profile
from gateway.types import SLA
from loadtests.controller.matrix import LEVELS, Workload, argument, selected, targets
from loadtests.controller.oracle import SLACK, grid, median
from loadtests.controller.sim_loop import Done, Run, simulate

SERVERS: dict[str, dict[str, float | int]] = {
    "clean": {},
    # The busy host of the real-engine runs: a front end that holds each request (in parallel and
    # one at a time) before the engine counts it, and writes tokens four at a time.
    "busy-host": {"frontend_overhead": 0.15, "frontend_busy": 0.004, "stream_burst": 4},
}


def server_profile(server: str, profile: str = "tiny-cpu-4l") -> Profile:
    """The engine profile `profile` behind the front end of `server` (one of SERVERS)."""
    return dataclasses.replace(get_profile(profile), **SERVERS[server])  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Result:
    tput: float
    goodput: float
    ratios: dict[str, float]
    """P90 / target per SLA signal."""
    mean_limit: float
    infeasible: bool

    @property
    def meets(self) -> bool:
        return all(r <= SLACK for r in self.ratios.values())


def p90s(done: Sequence[Done]) -> dict[str, float]:
    out: dict[str, float] = {}
    for signal in ("ttft", "tpot", "e2e"):
        values = sorted(v for d in done if (v := getattr(d, signal)) is not None)
        p = nearest_rank(values, 0.9)
        if p is not None:
            out[signal] = p
    return out


def judge(run: Run, sla: dict[str, float], settle: float) -> Result:
    done = [d for d in run.done if d.finished_at >= settle]
    span = run.duration - settle
    p90 = p90s(done)

    def met(d: Done) -> bool:
        return all((v := getattr(d, s)) is None or v <= t for s, t in sla.items())

    limits = [t.limit for t in run.ticks if t.at >= settle]
    last = run.states[-1] if run.states else {}
    return Result(
        tput=sum(d.output_tokens for d in done) / span,
        goodput=sum(d.output_tokens for d in done if met(d)) / span,
        ratios={s: p90.get(s, math.nan) / t for s, t in sla.items()},
        mean_limit=sum(limits) / len(limits) if limits else math.nan,
        infeasible=bool(last.get("sla_infeasible")),
    )


def unloaded(workload: Workload, profile: Profile, duration: float) -> dict[str, float]:
    run = simulate(workload, None, SLA(), duration=duration, profile=profile, clients=1)
    return p90s(run.done)


def to_sla(t: dict[str, float]) -> SLA:
    return SLA(ttft_p90=t.get("ttft"), tpot_p90=t.get("tpot"), e2e_p90=t.get("e2e"))


def verdict(adaptive: Result, direct: Result, fixed: dict[int, Result]) -> str:
    meeting = [r.goodput for r in fixed.values() if r.meets]
    fails = []
    # Where meeting the SLA costs throughput (no fixed limit that meets it reaches 90% of direct),
    # goodput against the best such limit is the target that can be met.
    bound = bool(meeting) and max(meeting) < 0.9 * direct.tput
    if adaptive.tput < 0.9 * direct.tput and not bound:
        fails.append("tput<0.9 direct")
    if meeting:
        if adaptive.goodput < 0.95 * max(meeting):
            fails.append("goodput<0.95 best fixed")
        if not adaptive.meets:
            fails.append(f"P90>{SLACK:g} target")
    elif not adaptive.infeasible:
        fails.append("infeasible not reported")
    return "PASS" if not fails else "FAIL " + ", ".join(fails)


def versus_best(adaptive: Result, direct: Result, fixed: dict[int, Result]) -> float:
    """Goodput over the best fixed limit's that meets the SLA; where none does, throughput over direct."""
    meeting = [r.goodput for r in fixed.values() if r.meets]
    if meeting and max(meeting) > 0:
        return adaptive.goodput / max(meeting)
    return adaptive.tput / direct.tput


def cell_line(name: str, r: Result, direct: Result) -> str:
    ratios = " ".join(f"{s}={v:.2f}" for s, v in r.ratios.items())
    flag = " infeasible" if r.infeasible else ""
    return (
        f"  {name:<10} tput {r.tput:6.0f} ({r.tput / direct.tput:4.0%})  goodput {r.goodput:6.0f}  "
        f"P90/target {ratios}  limit {r.mean_limit:5.1f}{flag}"
    )


@dataclass(frozen=True, slots=True)
class Outcome:
    """One controller in one cell at one seed."""

    cell: str
    algorithm: str
    seed: int
    ratio: float
    verdict: str
    limit: float
    best_fixed: int | None


def run_seed(
    workload: Workload, profile: Profile, algorithms: Sequence[str], args: argparse.Namespace, seed: int
) -> list[Outcome]:
    base = unloaded(workload, profile, args.duration)
    sweep = grid(workload, profile)

    def run(algo: str | None, params: dict[str, object], sla: dict[str, float]) -> Run:
        limit = None if algo is None else create(algo, params, to_sla(sla))
        return simulate(workload, limit, to_sla(sla), duration=args.duration, profile=profile, seed=seed)

    runs = {"direct": run(None, {}, {})}
    for n in sweep:
        runs[f"fixed-{n}"] = run("fixed", {"limit": n}, {})
    loaded = p90s([d for d in runs["direct"].done if d.finished_at >= args.settle])
    outcomes = []
    for level in LEVELS:
        sla = targets(workload, level, base, loaded)
        target_text = ", ".join(f"{s} {t:.3f}s" for s, t in sla.items())
        print(f"\n{workload.name} / {level} / seed {seed}: {target_text}")
        direct = judge(runs["direct"], sla, args.settle)
        fixed = {n: judge(runs[f"fixed-{n}"], sla, args.settle) for n in sweep}
        print(cell_line("direct", direct, direct))
        line = " ".join(f"{n}:{r.tput:.0f}/{r.goodput:.0f}{'' if r.meets else '!'}" for n, r in fixed.items())
        print(f"  fixed      tput/goodput per limit (! misses the SLA): {line}")
        meeting = {n: r.goodput for n, r in fixed.items() if r.meets}
        best = max(meeting, key=lambda n: meeting[n]) if meeting else None
        for name in algorithms:
            result = judge(
                run(name, args.params if name == args.algorithms[0] else {}, sla), sla, args.settle
            )
            v = verdict(result, direct, fixed)
            print(cell_line(name, result, direct) + f"  {v}")
            ratio = versus_best(result, direct, fixed)
            cell = f"{workload.name}/{level}"
            outcomes.append(Outcome(cell, name, seed, ratio, v, result.mean_limit, best))
    return outcomes


def summary(outcomes: Sequence[Outcome], algorithms: Sequence[str]) -> list[str]:
    """Per cell and controller: goodput over the best fixed limit's (throughput over direct where no
    limit meets the SLA), median and worst over the seeds, and how many seeds passed."""
    lines = [
        "| cell | controller | vs best fixed, median | worst | seeds passed | mean limit | best fixed |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for cell in dict.fromkeys(o.cell for o in outcomes):
        for name in algorithms:
            mine = [o for o in outcomes if o.cell == cell and o.algorithm == name]
            ratios = [o.ratio for o in mine]
            passed = sum(o.verdict == "PASS" for o in mine)
            best = "/".join(str(o.best_fixed) for o in mine if o.best_fixed is not None) or "none meets"
            limits = median([o.limit for o in mine])
            lines.append(
                f"| {cell} | {name} | {median(ratios):.2f} | {min(ratios):.2f} | {passed}/{len(mine)} "
                f"| {limits:.0f} | {best} |"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--server", choices=sorted(SERVERS), default="clean")
    parser.add_argument("--profile", default="tiny-cpu-4l")
    parser.add_argument("--algorithms", nargs="+", default=["sla"])
    parser.add_argument(
        "--workloads", nargs="*", help="built-in workloads (default all, none with --workload)"
    )
    parser.add_argument(
        "--workload",
        action="append",
        type=argument,
        default=[],
        help="a workload of your own (see real_matrix)",
    )
    parser.add_argument(
        "--params", type=json.loads, default={}, help="the first algorithm's parameters (JSON)"
    )
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--settle", type=float, default=40.0)
    parser.add_argument("--seeds", type=int, default=1, help="repetitions, seeds 0 .. N-1")
    args = parser.parse_args(argv)
    profile = server_profile(args.server, args.profile)
    started = time.perf_counter()
    outcomes: list[Outcome] = []
    for workload in selected(args.workloads, args.workload):
        for seed in range(args.seeds):
            outcomes += run_seed(workload, profile, args.algorithms, args, seed)
    passed = sum(o.verdict == "PASS" for o in outcomes)
    print(f"\n{passed} of {len(outcomes)} runs pass ({args.server}, {time.perf_counter() - started:.0f}s)\n")
    print("\n".join(summary(outcomes, args.algorithms)))


if __name__ == "__main__":
    main()
