"""Goodput of three replicas of `serve --workers 2` sharing admission through Redis, against one
gateway process, under the same closed-loop load.

Two simulated backends (`gemma3-4b-rtx4080` at `--speed 0.5`: a memory-bound engine whose step
time, not the gateway, sets the pace, at a token rate the 2-core machine streams without running
short of CPU) stand behind two gateways started once and measured in turn, interleaved A B A B ...
over `--rounds`, so a change in the machine's load falls on both alike:
- `1 process`: one `serve` without a Redis, every user against it;
- `3 replicas x 2 workers`: three `serve --workers 2` naming one redis-server (six processes that
  share each backend's slots), the same users spread evenly over the three.
The load is the one load generator (loadtests.closed_loop) with the same users, lengths and seed
for both, so only the gateway in front differs. The controller is `fixed` (`--limit` per backend)
unless `--controller sla`: with a fixed limit both gateways hold the same batch in each engine, so
a difference in goodput is what sharing costs, not where two learning controllers happened to
settle. Goodput is the output tokens/s of requests that met the SLA targets the gateways are given
(TTFT and TPOT, judged from dispatch as loadtests.goodput defines it), in the steady window after a
warm-up. Also measured per run: the client's CPU as a share of one core (it must stay well under one,
or the client would be what limits), the gateways' processes' CPU and the whole machine's busy
share (from /proc). Printed: per gateway the median over rounds and the spread, and the median of
the per-round ratios against the 5% target. The target is not judged when the machine was busy
90% of the time or more: the engines then run at the CPU's pace, which differs between a round's
two runs. Any error answer fails it.

    python -m loadtests.bench_scaleout_goodput [--rounds 4] [--seconds 25] [--docs docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from math import inf
from pathlib import Path

from loadtests import closed_loop
from loadtests.bench_scaleout import cpu_seconds, serve, spread
from loadtests.doc_tables import write_block
from loadtests.engine_metrics import wait_idle
from loadtests.proc_cpu import machine_seconds
from tests.procs import Proc, spawn_sim
from tests.redis_server import RedisServer, running_redis

PROFILE = "gemma3-4b-rtx4080"
MODEL = "google/gemma-3-4b-it"
SPEED = "0.5"
SLA = {"ttft_p90": 0.5, "tpot_p90": 0.05}
TARGETS = {"ttft": SLA["ttft_p90"], "tpot": SLA["tpot_p90"]}
"""Per request: met when its TTFT and its TPOT are each at or under the P90 target."""
ONE, SCALED = "1 process", "3 replicas x 2 workers"
TARGET_RATIO = 0.95
SATURATED = 0.9
"""The machine's busy share (median over runs) above which the comparison is not judged."""


@dataclass
class Run:
    goodput: float
    throughput: float
    ok: int
    errors: int
    ttft_p90: float
    tpot_p90: float
    client_cpu: float
    gateway_cpu: float
    """CPU seconds of the gateway's processes per second of wall time (cores)."""
    machine_busy: float
    """The whole machine's busy share (all cores) over the run."""
    error_kinds: str = ""
    """The failed requests by status and error, for the log."""


def gateway_config(
    sims: list[Proc], args: argparse.Namespace, redis: RedisServer | None
) -> dict[str, object]:
    controller: dict[str, object] = {"algorithm": "sla"}
    if args.controller == "fixed":
        controller = {"algorithm": "fixed", "params": {"limit": args.limit}}
    config: dict[str, object] = {
        "backends": [{"url": s.url, "name": f"sim{i}"} for i, s in enumerate(sims)],
        "sla": SLA,
        "controller": controller,
        "queue": {"max_depth": 500, "timeout": 120},
    }
    if redis is not None:
        config["state"] = {"redis_url": redis.url, "namespace": "goodput"}
    return config


def measure(gateways: list[Proc], sims: list[Proc], workload: closed_loop.Workload) -> Run:
    for sim in sims:  # the previous run's aborted requests must not share the engine with this one
        asyncio.run(wait_idle(sim.url))
    cpu_before = sum(cpu_seconds(gw.pid) for gw in gateways)
    total_before, idle_before = machine_seconds()
    result = closed_loop.run_sync([gw.url for gw in gateways], workload)
    total_after, idle_after = machine_seconds()
    p90s = result.p90s()
    return Run(
        goodput=result.tokens_per_s(TARGETS),
        throughput=result.tokens_per_s(),
        ok=len(result.ok),
        errors=result.failures,
        ttft_p90=p90s.get("ttft", float("nan")),
        tpot_p90=p90s.get("tpot", float("nan")),
        client_cpu=result.cpu_share(),
        gateway_cpu=(sum(cpu_seconds(gw.pid) for gw in gateways) - cpu_before) / result.wall_s,
        machine_busy=1.0 - (idle_after - idle_before) / max(1e-9, total_after - total_before),
        error_kinds=str(Counter((r.status, r.error[:80]) for r in result.records if r.error and r.finished)),
    )


def verdict_of(ratio: float, runs: dict[str, list[Run]]) -> str:
    """PASS or FAIL against the target; not judged on a saturated machine, where the engines' pace
    is the CPU's rather than the profile's and a round's two runs do not see the same machine."""
    busy = statistics.median(r.machine_busy for rs in runs.values() for r in rs)
    if busy >= SATURATED:
        return f"not judged, the machine was {busy:.0%} busy"
    errors = sum(r.errors for r in runs[SCALED])
    verdict = "PASS" if ratio >= TARGET_RATIO and not errors else "FAIL"
    return verdict + (f", {errors} error answers" if errors else "")


def table(runs: dict[str, list[Run]], args: argparse.Namespace, load: tuple[float, float]) -> str:
    def col(name: str, get: str, fmt: str, scale: float = 1.0) -> str:
        return spread([getattr(r, get) * scale for r in runs[name]], fmt)

    ratios = [
        b.goodput / a.goodput if a.goodput else inf for a, b in zip(runs[ONE], runs[SCALED], strict=True)
    ]
    ratio = statistics.median(ratios)
    medians = {name: statistics.median(r.goodput for r in rs) for name, rs in runs.items()}
    verdict = verdict_of(ratio, runs)
    lines = [
        f"{args.users} closed-loop users, prompts 128-512 and outputs 64-256 tokens, two `{PROFILE}` "
        f"simulators at `--speed {SPEED}`, controller `{args.controller}`"
        + (f" (limit {args.limit} per backend)" if args.controller == "fixed" else "")
        + f", SLA TTFT P90 <= {SLA['ttft_p90']} s and TPOT P90 <= {SLA['tpot_p90']} s; "
        f"{args.rounds} rounds interleaved, {args.seconds:g} s each ({args.warmup:g} s warm-up). "
        f"Load average (1 min): {load[0]:.1f} at the start, {load[1]:.1f} at the end.",
        "",
        "| gateway | goodput tok/s | throughput tok/s | requests ok | errors | TTFT P90 | TPOT P90 "
        "| client CPU (one core) | gateways' CPU (cores) | machine busy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in (ONE, SCALED):
        lines.append(
            f"| {name} | {col(name, 'goodput', ',.0f')} | {col(name, 'throughput', ',.0f')} "
            f"| {col(name, 'ok', '.0f')} | {sum(r.errors for r in runs[name])} "
            f"| {col(name, 'ttft_p90', '.0f', 1e3)} ms | {col(name, 'tpot_p90', '.1f', 1e3)} ms "
            f"| {col(name, 'client_cpu', '.0%')} | {col(name, 'gateway_cpu', '.2f')} "
            f"| {col(name, 'machine_busy', '.0%')} |"
        )
    lines += [
        "",
        f"Goodput of {SCALED} against {ONE}, per round: "
        + ", ".join(f"{r:.3f}" for r in ratios)
        + f"; median **{ratio:.3f}** (target >= {TARGET_RATIO}: {verdict}); ratio of the medians "
        f"{medians[SCALED] / medians[ONE] if medians[ONE] else inf:.3f}.",
    ]
    return "\n".join(lines)


def run_rounds(args: argparse.Namespace, workload: closed_loop.Workload) -> dict[str, list[Run]]:
    """Start both gateways once, warm each up, then measure them in turn over the rounds."""
    runs: dict[str, list[Run]] = {ONE: [], SCALED: []}
    sim_args = ("--profile", PROFILE, "--speed", SPEED)
    with running_redis() as redis, spawn_sim(*sim_args) as a, spawn_sim(*sim_args) as b:
        sims = [a, b]
        started: list[Proc] = []
        try:
            started.append(serve(gateway_config(sims, args, None)))
            gateways = {ONE: [started[0]], SCALED: []}
            for _ in range(3):
                started.append(serve(gateway_config(sims, args, redis), workers=2))
                gateways[SCALED].append(started[-1])
            warmup = dataclasses.replace(workload, duration_s=8.0, warmup_s=2.0)
            for procs in gateways.values():
                measure(procs, sims, warmup)  # connection pools, scripts loaded, code paths
            for _ in range(args.rounds):
                for name, procs in gateways.items():
                    runs[name].append(measure(procs, sims, workload))
                    print(name, runs[name][-1], flush=True)
        finally:
            for proc in started:
                proc.stop()
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=25.0, help="load time per run, warm-up included")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--users", type=int, default=24)
    parser.add_argument("--controller", choices=["fixed", "sla"], default="fixed")
    parser.add_argument("--limit", type=int, default=6, help="per backend, with --controller fixed")
    parser.add_argument("--docs", type=Path, help="also write the table into this document's block")
    args = parser.parse_args()
    workload = closed_loop.Workload(
        clients=args.users,
        duration_s=args.seconds,
        model=MODEL,
        prompt_tokens=(128, 512),
        output_tokens=(64, 256),
        warmup_s=args.warmup,
        drain_s=30.0,
    )
    load_start = os.getloadavg()[0]
    runs = run_rounds(args, workload)
    out = table(runs, args, (load_start, os.getloadavg()[0]))
    print(out)
    if args.docs is not None:
        write_block(args.docs, "bench-scaleout-goodput", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
