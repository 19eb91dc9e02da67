"""Routing benchmark: prefix, least_loaded and round_robin on four simulated vLLM backends.

Workloads (loadtests/routing/workloads.py): multi-turn chat over 16 shared system prompts, questions
about 50 shared documents, and prompts that share nothing. For each workload the strategies run side
by side, each on its own gateway and backends (loadtests/routing/run.py); with `--repeat N` every
workload runs N times (other seeds). Prints one table per workload (medians, and the range over the
repetitions) and the targets, and writes every run's numbers to `results/routing/summary.json`.

    .venv/bin/python -m loadtests.bench_routing                       # everything (~8 min)
    .venv/bin/python -m loadtests.bench_routing --repeat 3            # with the spread (~25 min)
    .venv/bin/python -m loadtests.bench_routing --workloads chat --strategies prefix least_loaded
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import json
import sys
import time
from pathlib import Path

from gateway.routing import STRATEGIES
from loadtests.doc_tables import write_block
from loadtests.routing import workloads
from loadtests.routing.cost import cost_table, decision_cost
from loadtests.routing.report import Result, served_cpu, summarize, table, targets
from loadtests.routing.run import MODEL, Setup, run


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_routing", description=__doc__.split("\n")[0])
    p.add_argument("--workloads", nargs="+", default=list(workloads.WORKLOADS), choices=workloads.WORKLOADS)
    p.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    defaults = Setup()
    for f in dataclasses.fields(Setup):
        kind = type(getattr(defaults, f.name))
        p.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=getattr(defaults, f.name))
    p.add_argument("--out", type=Path, default=Path("results/routing"))
    p.add_argument("--docs", type=Path, help="also write the tables into this document's block")
    p.add_argument("--report-only", action="store_true", help="report the runs saved in --out again")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup = Setup(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Setup)})
    args.out.mkdir(parents=True, exist_ok=True)
    summary = args.out / "summary.json"
    if args.report_only:
        saved = json.loads(summary.read_text())
        results = [Result(**r) for r in saved["runs"]]
        names = list(dict.fromkeys(r.workload for r in results))
        return _finish(args, results, list(dict.fromkeys(r.strategy for r in results)), names)
    results: list[Result] = []
    began = time.perf_counter()
    for rep in range(args.repeat):
        for workload in args.workloads:
            shift = rep % len(args.strategies)
            order = args.strategies[shift:] + args.strategies[:shift]
            factory = functools.partial(
                workloads.make, workload, MODEL, setup.users, setup.max_tokens, args.seed + rep
            )
            raws = run(setup, factory, order, args.seed + rep)
            served = sum(map(served_cpu, raws.values()))
            for strategy in args.strategies:
                result = summarize(raws[strategy], workload, strategy, rep, setup.max_tokens, served)
                results.append(result)
                print(
                    f"[{time.perf_counter() - began:6.0f} s] {workload} {strategy} #{rep}: "
                    f"{result.rps:.1f} req/s, TTFT P90 {result.ttft_p90 or 0:.2f} s, "
                    f"hit {result.hit_rate or 0:.1%}, machine {result.machine_busy:.1f} cores busy, "
                    f"errors {result.errors}" + _kinds(raws[strategy].errors),
                    flush=True,
                )
    summary.write_text(
        json.dumps({"setup": dataclasses.asdict(setup), "runs": [r.as_dict() for r in results]}, indent=1)
    )
    print(f"\n{len(results)} runs in {time.perf_counter() - began:.0f} s; {setup}\n")
    return _finish(args, results, args.strategies, args.workloads)


def _kinds(errors: list[str]) -> str:
    """The commonest failures, so that a run with errors says what they were."""
    common = collections.Counter(errors).most_common(3)
    return "".join(f"; {n} x {kind}" for kind, n in common)


def _finish(args: argparse.Namespace, results: list[Result], strategies: list[str], names: list[str]) -> int:
    report = _report(results, strategies, names)
    print(report)
    if args.docs is not None:
        write_block(args.docs, "bench-routing", report)
    return 1 if any(not passed for _, passed, _ in targets(results)) else 0


def _report(results: list[Result], strategies: list[str], names: list[str]) -> str:
    parts = [f"#### {name}\n\n{table(results, name, strategies)}" for name in names]
    checks = "\n".join(
        f"| {name} | {detail} | {'PASS' if passed else 'FAIL'} |" for name, passed, detail in targets(results)
    )
    parts.append(f"| target | prefix / least_loaded: median (each repetition) | |\n|---|---|---|\n{checks}")
    costs = cost_table(decision_cost(strategies))
    parts.append(f"Cost of one routing decision (`Pool.pick` + release):\n\n{costs}")
    return "\n\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
