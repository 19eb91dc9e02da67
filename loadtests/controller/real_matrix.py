"""The controller evaluation on the real vLLM engine: every workload x SLA level, judged.

usage: python -m loadtests.controller.real_matrix [--workloads a,b] [--workload SPEC] [--levels loose,tight]
       [--repeat 3] [--modes direct,fixed,adaptive] [--fixed-factors 0.125,0.25,1,2] [--algorithm sla ...]
       [--quick] [--warmup 15] [--window 25] [--drain 12] [--engine-url URL] [--engine-nice 10] [--out DIR]
       [--rejudge] [--targets-from DIR/summary.json]

Per workload: its unloaded latency first (one client straight at the engine); then the repetitions,
each running every mode once (loadtests.controller.plan): direct, the fixed limits at an eighth and
a quarter of the KV knee, the knee and twice it, the adaptive controller once per level, a fresh
gateway per mode. The first direct run's P90s are the loaded latency; with the unloaded ones they
set each level's targets (loadtests.controller.matrix) before any gateway run; `--targets-from`
takes them instead, with the P90s behind them, from an earlier run's summary.json for the workloads
it holds, so runs on different days, or a single cell run again, face the same targets: the
one-client run that sets the tight level catches a stall of a busy host now and then (a TTFT P90 of
0.29 s where 0.03-0.04 was usual), which moved one tight target from 0.22 s to 0.64. Every run's
per-request records are judged against every level afterwards, so direct and fixed runs serve all
levels. Every mode gets the same warm-up and window, long enough for an adaptive controller to
converge from the initial limit of a freshly started gateway; the estimated wall time is printed
before the first run. At the end: the levels' targets with the P90s that set them, one table row per
cell with its verdict (loadtests.controller.verdict) and one per mode, printed and written to
DIR/report.md; DIR/raw/ holds one JSON per run (records, /admin/state samples, summary) and
DIR/summary.json the summaries, the targets and the P90s. `--rejudge` writes the report again from
DIR/summary.json with the current verdict rules, without running anything.

Without --engine-url the engine is started from VLLM_VENV on a free port, at niceness
`--engine-nice` (its processes' and its session's: scripts/vllm_cpu/engine.py), and stopped by its
pid at the end. The niceness is there because vLLM's CPU engine keeps every core of this host busy:
at the same priority it stalled the gateway's and the client's event loops for up to 3.6 s at a
time, and those stalls, not the engine, were the TTFT P90 the lowest limits read
(docs/benchmarks.md); a GPU engine does its work on the GPU. The measuring client is this process;
its CPU share is in the table (it must stay well under one core).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from loadtests import closed_loop, goodput
from loadtests.controller import matrix, plan, report, runner, verdict
from loadtests.vllm_engine import EngineInfo, engine_info, engine_server

UNLOADED_S = 10.0
ENGINE_NICE = 10


def load_for(workload: matrix.Workload, info: EngineInfo, args: argparse.Namespace) -> closed_loop.Workload:
    return closed_loop.Workload(
        clients=args.clients or workload.clients,
        duration_s=args.warmup + args.window,
        model=info.model,
        endpoint=workload.endpoint,
        stream=workload.stream,
        prompt_tokens=workload.prompt_tokens,
        output_tokens=workload.output_tokens,
        shared_prefix_tokens=workload.shared_prefix_tokens,
        max_model_len=info.max_model_len,
        warmup_s=args.warmup,
        drain_s=args.drain,
    )


def unloaded(workload: matrix.Workload, info: EngineInfo, args: argparse.Namespace) -> dict[str, float]:
    """P90s of one client straight at the engine (every request counts: no warm-up)."""
    load = dataclasses.replace(
        load_for(workload, info, args), clients=1, warmup_s=0.0, duration_s=args.unloaded, drain_s=60.0
    )
    result = closed_loop.run_sync(info.url, load)
    return goodput.p90s(result.records, result.started, result.stopped)


def run_workload(
    workload: matrix.Workload, info: EngineInfo, args: argparse.Namespace, out: Path
) -> tuple[dict[str, dict[str, float]], list[verdict.RunSummary], dict[str, dict[str, float]]]:
    """Every run of the workload; its levels' targets, the run summaries and the P90s behind them.

    The targets are set after the first run, direct with every client (the loaded P90s); the
    schedule starts with it, so every gateway run knows its level's targets. Targets given
    (`args.given_targets`) are used as they are, with the P90s that set them.
    """
    given = args.given_targets.get(workload.name)
    if given is not None:
        targets: dict[str, dict[str, float]] = given["targets"]
        measured: dict[str, dict[str, float]] = dict(given["p90s"])
        print(f"\n== {workload.name}: targets given: {_targets_text(targets)}", flush=True)
    else:
        targets = {}
        measured = {"unloaded": unloaded(workload, info, args)}
        print(f"\n== {workload.name}: unloaded P90 {_p90_text(measured['unloaded'])}", flush=True)
    limits = plan.fixed_limits(workload, info.kv_tokens or 8192, args.max_num_seqs, args.fixed_factors)
    modes = plan.modes(limits, args.levels, args.algorithm, args.modes)
    load = load_for(workload, info, args)
    summaries = []
    for run in plan.schedule(workload, modes, args.repeat):
        began = time.monotonic()
        result, states = runner.execute(run, info.url, load, targets.get(run.mode.level or "loose", {}))
        if not targets:
            measured["loaded"] = result.p90s()
            targets = {
                level: matrix.targets(workload, level, measured["unloaded"], measured["loaded"])
                for level in matrix.LEVELS
            }
            loaded = _p90_text(measured["loaded"])
            print(f"== {workload.name}: loaded P90 {loaded}; targets {_targets_text(targets)}")
        summary = runner.summarize(run, result, states, {level: targets[level] for level in args.levels})
        summaries.append(summary)
        raw = {
            "summary": dataclasses.asdict(summary),
            "targets": targets,
            "p90s": measured,
            "states": [{**s, "at": round(s["at"] - result.started, 3)} for s in states],
            "records": runner.raw_record(result),
        }
        name = f"{workload.name}-r{run.repetition}-{run.mode.name}.json"
        (out / "raw" / name).write_text(json.dumps(raw) + "\n")
        print(
            f"{workload.name} r{run.repetition} {run.mode.name:<16} {summary.throughput:7.0f} tok/s  "
            f"p90 {_p90_text(summary.p90)}  cpu {summary.client_cpu:.0%}  "
            f"limit {'-' if summary.limit_mean is None else f'{summary.limit_mean:.1f}'}  "
            f"infeasible {summary.sla_infeasible}  ({time.monotonic() - began:.0f} s)",
            flush=True,
        )
    return targets, summaries, measured


def _targets_text(targets: dict[str, dict[str, float]]) -> str:
    return "; ".join(f"{level} {_p90_text(t)}" for level, t in targets.items())


def _p90_text(p90: dict[str, float]) -> str:
    return " ".join(f"{s}={v:.3f}" for s, v in p90.items())


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", help="built-in workloads by name (default all, none with --workload)")
    parser.add_argument(
        "--workload",
        action="append",
        type=matrix.argument,
        default=[],
        help="a workload of your own, NAME:chat|completions:stream|nonstream:PROMPT:OUTPUT[:prefix=N]"
        "[:clients=N], PROMPT and OUTPUT tokens N or LO-HI; again for more",
    )
    parser.add_argument("--levels", default=",".join(matrix.LEVELS))
    parser.add_argument("--repeat", type=int, help="repetitions (default 3; 2 with --quick)")
    parser.add_argument("--modes", default="direct,fixed,adaptive", help="kinds of mode to run")
    parser.add_argument(
        "--algorithm",
        action="append",
        type=plan.Controller.parse,
        help="an adaptive controller to judge (default sla); again for more, each judged on its own, "
        'and LABEL=ALGORITHM{JSON} for one with other parameters, e.g. u95=sla{"increase_below": 0.95}',
    )
    parser.add_argument("--quick", action="store_true", help="10 s warm-up, 15 s window, repeat 2")
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--window", type=float, default=25.0, help="steady window after the warm-up (s)")
    parser.add_argument("--drain", type=float, default=12.0, help="longest wait for generating streams")
    parser.add_argument("--unloaded", type=float, default=UNLOADED_S, help="one-client run per workload (s)")
    parser.add_argument("--clients", type=int, default=0, help="override each workload's client count")
    parser.add_argument(
        "--fixed-factors",
        type=lambda text: [float(f) for f in text.split(",") if f],
        default=list(plan.FIXED_FACTORS),
        help="fixed limits as multiples of the KV knee (default 0.125,0.25,1,2)",
    )
    parser.add_argument("--max-num-seqs", type=int, default=32, help="the engine's (sizes the fixed sweep)")
    parser.add_argument("--engine-url")
    parser.add_argument(
        "--engine-nice",
        type=int,
        default=ENGINE_NICE,
        help=f"niceness of the engine it starts (default {ENGINE_NICE}; 0 for the same priority as the rest)",
    )
    parser.add_argument("--out", type=Path, default=Path("results/controller-real"))
    parser.add_argument("--rejudge", action="store_true", help="only re-judge OUT/summary.json")
    parser.add_argument(
        "--targets-from",
        type=Path,
        help="an earlier run's summary.json: its workloads keep the SLA targets it set (no one-client run)",
    )
    args = parser.parse_args(argv)
    args.algorithm = args.algorithm or [plan.Controller("sla", "sla")]
    if args.quick:
        args.warmup, args.window, args.drain, args.unloaded = 10.0, 15.0, 8.0, 6.0
    if args.repeat is None:
        args.repeat = 2 if args.quick else 3
    names = None if args.workloads is None else [n for n in args.workloads.split(",") if n]
    args.workload_list = matrix.selected(names, args.workload)
    args.levels = [level for level in args.levels.split(",") if level]
    unknown = set(args.levels) - set(matrix.LEVELS)
    if unknown:
        parser.error(f"unknown levels {sorted(unknown)}; known: {', '.join(matrix.LEVELS)}")
    args.modes = [m for m in args.modes.split(",") if m]
    if not args.rejudge and "direct" not in args.modes:
        parser.error("--modes needs direct: its first run's P90s set the SLA levels")
    try:
        args.given_targets = given_targets(args.targets_from, args.levels)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        parser.error(f"--targets-from {args.targets_from}: {exc}")
    return args


def given_targets(path: Path | None, levels: list[str]) -> dict[str, dict[str, Any]]:
    """Per workload of the summary.json at `path`, its levels' `targets` and the `p90s` behind them
    (none without a path). Raises ValueError where a workload lacks one of `levels`."""
    if path is None:
        return {}
    saved = json.loads(path.read_text())
    out: dict[str, dict[str, Any]] = {}
    for name, targets in saved["targets"].items():
        missing = [level for level in levels if level not in targets]
        if missing:
            raise ValueError(f"workload {name!r} has no targets for {', '.join(missing)}")
        out[name] = {"targets": targets, "p90s": saved.get("p90s", {}).get(name, {})}
    return out


def estimate_s(args: argparse.Namespace) -> float:
    """The plan's expected wall time, before the engine tells the fixed limits (one per factor)."""
    modes = plan.modes(range(len(args.fixed_factors)), args.levels, args.algorithm, args.modes)
    workloads = len(args.workload_list)
    runs = workloads * args.repeat * len(modes)
    return plan.estimate_s(runs, workloads, args.warmup, args.window, args.drain, args.unloaded)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(1)


def write_report(
    out: Path,
    header: str,
    saved: dict[str, Any],
    summaries: list[verdict.RunSummary],
    levels: list[str],
) -> bool:
    """Judge every cell, print the tables and write report.md and summary.json; True if all pass.

    `saved` holds per workload its levels' `targets` and the `p90s` (unloaded, loaded) behind them.
    """
    targets, p90s = saved["targets"], saved.get("p90s", {})
    named = sorted({s.controller for s in summaries if s.controller is not None})
    labels: list[str | None] = list(named) if len(named) > 1 else [None]
    cells = [
        verdict.judge(summaries, w, level, targets[w][level], label)
        for w in targets
        for level in levels
        for label in labels
    ]
    tables = [
        report.levels_table(p90s, targets),
        report.cell_table(cells),
        report.mode_table(summaries, levels),
    ]
    text = header + "\n\n".join(t for t in tables if t) + "\n"
    print("\n" + text)
    (out / "report.md").write_text(text)
    runs = [dataclasses.asdict(s) for s in summaries]
    (out / "summary.json").write_text(json.dumps({**saved, "runs": runs}, indent=1))
    return all(c.passed for c in cells)


def rejudge(out: Path, levels: list[str]) -> bool:
    """The report again from out/summary.json, with the current verdict rules; no runs."""
    saved = json.loads((out / "summary.json").read_text())
    summaries = [verdict.RunSummary(**r) for r in saved["runs"]]
    header = f"Re-judged from {out / 'summary.json'}\n\n"
    return write_report(out, header, {k: v for k, v in saved.items() if k != "runs"}, summaries, levels)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.rejudge:
        return 0 if rejudge(args.out, args.levels) else 1
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    (args.out / "raw").mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    saved: dict[str, Any] = {"targets": {}, "p90s": {}}
    summaries: list[verdict.RunSummary] = []
    print(f"estimated wall time: {estimate_s(args) / 60:.0f} min", flush=True)
    with engine_server(args.engine_url, nice=args.engine_nice) as url:
        info = engine_info(url)
        print(f"engine {info}", flush=True)
        for workload in args.workload_list:
            targets, runs, p90s = run_workload(workload, info, args, args.out)
            saved["targets"][workload.name] = targets
            saved["p90s"][workload.name] = p90s
            summaries += runs
    header = (
        f"Command: python -m loadtests.controller.real_matrix {' '.join(argv)}\n"
        f"Wall time: {(time.monotonic() - started) / 60:.1f} min\n\n"
    )
    return 0 if write_report(args.out, header, saved, summaries, args.levels) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
