"""Scenario benchmark: the gateway (fixed limits and adaptive) against no gateway, on simulated vLLM.

Scenarios (a)-(f) of loadtests/scenarios/definitions.py, each run straight to the backends
(round-robin, no gateway), through the gateway with a sweep of fixed limits, and adaptive. Prints a
table per scenario, the project's targets as PASS/FAIL with their numbers, and writes
`results/scenarios/summary.json`, `results/scenarios/report.md` and a PNG per gateway run,
and for adaptive runs the controller's decisions (`NAME-MODE-decisions.tsv`).

    .venv/bin/python -m loadtests.bench_scenarios                     # everything (~25 min)
    .venv/bin/python -m loadtests.bench_scenarios --quick             # shorter runs, smaller sweep
    .venv/bin/python -m loadtests.bench_scenarios --scenario b-halve --modes sla fixed-16
    .venv/bin/python -m loadtests.bench_scenarios --algorithms sla aimd gradient
    .venv/bin/python -m loadtests.bench_scenarios --repeat 3 --modes fixed-16 sla   # with the spread
    .venv/bin/python -m loadtests.bench_scenarios --scenario a-overload --modes sla \\
        --params '{"increase_below": 0.8}'
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from loadtests.doc_tables import write_block
from loadtests.scenarios.analysis import summarize
from loadtests.scenarios.definitions import FIXED_SWEEP, modes, scenarios
from loadtests.scenarios.plots import plot_run
from loadtests.scenarios.report import (
    check_targets,
    phase_table,
    single_fixed_check,
    spread_table,
    summary_table,
    table,
)
from loadtests.scenarios.runner import RunData, run

ROOT = Path(__file__).resolve().parent.parent
QUICK_SCALE = 0.5
QUICK_SWEEP = (8, 16)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)

    known = scenarios()
    names = args.scenario or list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; known: {', '.join(known)}")
    sweep = tuple(args.sweep) if args.sweep else (QUICK_SWEEP if args.quick else FIXED_SWEEP)
    run_modes = args.modes or modes(tuple(args.algorithms), sweep)
    params = json.loads(args.params) if args.params else None
    controller = json.loads(args.controller) if args.controller else None
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        saved = json.loads((args.out / "summary.json").read_text())
        return 0 if all(ok for _, ok, _ in write_report(saved, args.out, "saved", args.docs)) else 1

    by_scenario: dict[str, list[dict[str, Any]]] = {}
    started = time.perf_counter()
    for name in names:
        scenario = known[name].scaled(QUICK_SCALE) if args.quick else known[name]
        rows = by_scenario.setdefault(name, [])
        for rep in range(args.repeat):
            suffix = f"-{rep + 1}" if args.repeat > 1 else ""
            for mode in run_modes:
                adaptive = not mode.startswith(("fixed-", "direct"))
                data = run(
                    scenario,
                    mode,
                    params if adaptive else None,
                    seed=args.seed + rep,
                    controller=controller if adaptive else None,
                )
                row = {**summarize(data), "run": rep, "runs": args.repeat}
                rows.append(row)
                print(
                    f"[{time.perf_counter() - started:6.0f}s] {name:12s} {mode + suffix:12s} "
                    f"goodput {row['goodput_rps']:5.1f} r/s  served {row['served']:5d}  "
                    f"shed {row['shed']:5d}  errors {row['errors']:4d}  wall {row['wall_s']:.0f}s",
                    flush=True,
                )
                stem = args.out / f"{name}-{mode}{suffix}"
                if (args.plots == "all" and mode != "direct") or (args.plots == "adaptive" and adaptive):
                    plot_run(data, stem.with_name(stem.name + ".png"))
                if adaptive:
                    write_decisions(data, stem.with_name(stem.name + "-decisions.tsv"))
        (args.out / "summary.json").write_text(json.dumps(by_scenario, indent=1, default=str))

    results = write_report(by_scenario, args.out, "quick" if args.quick else "full", args.docs)
    print(f"\ntotal {time.perf_counter() - started:.0f} s; results in {args.out}")
    return 0 if all(ok for _, ok, _ in results) else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", nargs="*", default=None, help="names (default: all)")
    parser.add_argument("--modes", nargs="*", default=None, help="e.g. direct fixed-16 sla")
    parser.add_argument("--algorithms", nargs="*", default=["sla"])
    parser.add_argument("--sweep", nargs="*", type=int, default=None)
    parser.add_argument("--params", default=None, help="JSON params for the adaptive algorithm")
    parser.add_argument(
        "--controller", default=None, help='JSON controller settings, e.g. {"min_samples": 24}'
    )
    parser.add_argument("--quick", action="store_true", help="half-length runs, 3 fixed limits")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "scenarios")
    parser.add_argument("--plots", choices=["adaptive", "all", "none"], default="all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per scenario (seeds SEED..SEED+N-1); report the spread",
    )
    parser.add_argument("--report-only", action="store_true", help="rebuild report.md from OUT/summary.json")
    parser.add_argument("--docs", type=Path, help="also write the summary table into this document's block")
    return parser


def write_decisions(data: RunData, path: Path) -> None:
    """The controller's decisions over the run, one line per backend whenever one changed."""
    lines = ["seconds\tbackend\tlimit\tinflight\treason\tdetail"]
    last: dict[int, tuple[object, ...]] = {}
    for tick in data.ticks:
        for i, b in enumerate(tick.backends):
            key = (b.limit, b.reason, b.detail)
            if last.get(i) != key:
                last[i] = key
                lines.append(f"{tick.at:.1f}\tb{i}\t{b.limit}\t{b.inflight}\t{b.reason}\t{b.detail}")
    path.write_text("\n".join(lines) + "\n")


def write_report(
    by_scenario: dict[str, list[dict[str, Any]]], out: Path, label: str, docs: Path | None = None
) -> list[tuple[str, bool, str]]:
    """Print and save `report.md`: a table per scenario, per-phase numbers, targets PASS/FAIL;
    with DOCS, the summary table goes into that document's `bench-scenarios` block too."""
    known = scenarios()
    if docs is not None:
        titles = {name: known[name].title if name in known else name for name in by_scenario}
        write_block(docs, "bench-scenarios", summary_table(by_scenario, titles))
    report = [f"# Scenario results ({label})", ""]
    for name, rows in by_scenario.items():
        report += [f"## {(known[name].title if name in known else name)}", "", table(rows), ""]
        if any(r.get("runs", 1) > 1 for r in rows):
            report += [spread_table(rows), ""]
        if any(len(r["phases"]) > 1 for r in rows):
            report += [phase_table(rows), ""]
        for r in rows:
            if "tenants" in r:
                shares = ", ".join(
                    f"{t}: {v['served']}/{v['requests']} served ({100 * v['served_share']:.0f}%), "
                    f"{v['met']} met SLA"
                    for t, v in r["tenants"].items()
                )
                report.append(f"- {r['mode']}: {shares}")
            if r["shed_reasons"] or r["error_kinds"]:
                report.append(f"- {r['mode']}: shed {r['shed_reasons']}, errors {r['error_kinds']}")
        report.append("")
    results = check_targets(by_scenario)
    report += ["## Targets", ""]
    report += [f"- {'PASS' if ok else 'FAIL'} {what}: {numbers}" for what, ok, numbers in results]
    report += ["", "Single fixed limits:", ""]
    report += [f"- {line}" for line in single_fixed_check(by_scenario)]
    text = "\n".join(report)
    (out / "report.md").write_text(text + "\n")
    print()
    print(text)
    return results


if __name__ == "__main__":
    sys.exit(main())
