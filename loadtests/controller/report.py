"""Markdown tables of the controller evaluation: one row per cell with its verdict, one per mode.

Numbers are medians over repetitions with the spread (min-max) beside them; tok/s are output
tokens per second in the steady window, goodput counts only requests meeting every target of the
level, and P90s are the latency the SLA judges (from dispatch: the gateway's queue excluded).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

from loadtests.controller.verdict import Cell, RunSummary, Spread

SHORT = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "e2e"}


def spread(value: Spread | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value.median:,.{digits}f} ({value.low:,.{digits}f}-{value.high:,.{digits}f})"


def targets_text(targets: Mapping[str, float]) -> str:
    return ", ".join(f"{SHORT[s]} {t:.3f}" for s, t in targets.items())


def levels_table(p90s: Mapping[str, Mapping[str, Mapping[str, float]]], targets: Mapping[str, Any]) -> str:
    """Per workload and signal: the unloaded and loaded P90s and each level's target from them."""
    if not p90s:
        return ""
    levels = list(next(iter(targets.values()), {}))
    lines = [
        "| workload | signal | unloaded P90 (s) | loaded P90 (s) | " + " | ".join(levels) + " |",
        "|---|---|---:|---:|" + "---:|" * len(levels),
    ]
    for workload, measured in p90s.items():
        for signal in targets[workload].get(levels[0], {}) if levels else ():
            values = [measured.get(kind, {}).get(signal) for kind in ("unloaded", "loaded")]
            shown = " | ".join("-" if v is None else f"{v:.3f}" for v in values)
            level_targets = " | ".join(f"{targets[workload][level][signal]:.3f}" for level in levels)
            lines.append(f"| {workload} | {SHORT[signal]} | {shown} | {level_targets} |")
    return "\n".join(lines)


def cell_table(cells: Sequence[Cell]) -> str:
    lines = [
        "| workload | level | targets (s) | direct tok/s | best fixed meeting SLA: goodput | "
        "adaptive tok/s | adaptive goodput | adaptive P90 (s) | sla_infeasible | client CPU | verdict |",
        "|---|---|---|---:|---:|---:|---:|---|---|---:|---|",
    ]
    for c in cells:
        reference = (
            f"{c.reference} {c.reference_goodput:,.0f}"
            if c.reference is not None and c.reference_goodput is not None
            else "none (infeasible)"
        )
        p90 = ", ".join(f"{SHORT[s]} {spread(v, 3)}" for s, v in c.adaptive_p90.items()) or "-"
        failed = [f"{name}: {detail}" for name, ok, detail in c.checks if not ok]
        verdict = "PASS" if c.passed else "FAIL: " + "; ".join(failed)
        level = c.level if c.controller is None else f"{c.level} ({c.controller})"
        lines.append(
            f"| {c.workload} | {level} | {targets_text(c.targets)} | {spread(c.direct)} | {reference} | "
            f"{spread(c.adaptive)} | {spread(c.adaptive_goodput)} | {p90} | {c.infeasible_reports} | "
            f"{c.client_cpu_max:.0%} | {verdict} |"
        )
    return "\n".join(lines)


def mode_table(runs: Sequence[RunSummary], levels: Sequence[str]) -> str:
    """Per workload and mode: throughput, each level's goodput, P90s, the limit the gateway held."""
    head = " | ".join(f"goodput {level}" for level in levels)
    lines = [
        f"| workload | mode | runs | tok/s | {head} | P90 (s, median) | limit (mean, min-max) | failed |",
        "|---|---|---:|---:|" + "---:|" * len(levels) + "---|---|---:|",
    ]
    groups: dict[tuple[str, str], list[RunSummary]] = {}
    for r in runs:
        groups.setdefault((r.workload, r.mode), []).append(r)
    for (workload, mode), group in groups.items():
        goodputs = " | ".join(
            spread(Spread.of([r.goodput[level] for r in group if level in r.goodput])) for level in levels
        )
        signals = sorted({s for r in group for s in r.p90})
        p90 = ", ".join(f"{SHORT[s]} {median(r.p90[s] for r in group if s in r.p90):.3f}" for s in signals)
        means = [r.limit_mean for r in group if r.limit_mean is not None]
        lows = [r.limit_min for r in group if r.limit_min is not None]
        highs = [r.limit_max for r in group if r.limit_max is not None]
        limit = f"{median(means):.1f} ({min(lows):.0f}-{max(highs):.0f})" if means else "-"
        lines.append(
            f"| {workload} | {mode} | {len(group)} | {spread(Spread.of([r.throughput for r in group]))} | "
            f"{goodputs} | {p90} | {limit} | {sum(r.failures for r in group)} |"
        )
    return "\n".join(lines)
