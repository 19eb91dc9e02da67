"""Tables (Markdown) of the run summaries and the project's targets checked as PASS/FAIL with numbers."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median
from typing import Any

from loadtests.scenarios.definitions import SLA_TPOT, SLA_TTFT

ADAPTIVE = ("sla", "aimd", "gradient")
RSS_LIMIT_MB = 300.0
RECOVERY_LIMIT_S = 15.0
FAIR_TOLERANCE = 1.1


def _f(value: Any, digits: int = 2, pct: bool = False) -> str:
    if value is None:
        return "-"
    if pct:
        return f"{100 * value:.0f}%"
    return f"{value:.{digits}f}"


def _label(r: dict[str, Any]) -> str:
    """The mode, with the run number when the scenario was run more than once."""
    return f"{r['mode']} #{r['run'] + 1}" if r.get("runs", 1) > 1 else r["mode"]


def _by_run(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Rows grouped by repetition (rows without a run number are one run)."""
    runs: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        runs.setdefault(r.get("run", 0), []).append(r)
    return [runs[i] for i in sorted(runs)]


def table(rows: Sequence[dict[str, Any]]) -> str:
    head = (
        "| mode | goodput r/s | served r/s | attainment | shed | errors | P90 TTFT client (s) "
        "| P90 TTFT admitted (s) | P90 TPOT (ms) | converge (s) | peak RSS (MB) | client lag max (s) |"
    )
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        tpot = None if r["p90_tpot"] is None else 1000 * r["p90_tpot"]
        lines.append(
            f"| {_label(r)} | {_f(r['goodput_rps'], 1)} | {_f(r['served_rps'], 1)} "
            f"| {_f(r['attainment'], pct=True)} | {_f(r['shed_share'], pct=True)} "
            f"| {_f(r['error_share'], pct=True)} | {_f(r['p90_ttft'])} "
            f"| {_f(r['p90_admitted_ttft'])} | {_f(tpot, 1)} | {_f(r['converge_s'], 1)} "
            f"| {_f(r['peak_rss_mb'], 0)} | {_f(r.get('client_lag_max_s'))} |"
        )
    return "\n".join(lines)


def phase_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| mode | phase | summed limit | goodput r/s | P90 TTFT (s) | P90 TPOT (ms) | converge (s) "
        "| back under SLA after (s) |",
        "|" + "---|" * 8,
    ]
    for r in rows:
        for p in r["phases"]:
            tpot = None if p["p90_tpot"] is None else 1000 * p["p90_tpot"]
            limit = p.get("summed_limit", p.get("mean_limit"))
            lines.append(
                f"| {_label(r)} | {p['label']} | {_f(limit, 1)} | {_f(p['goodput_rps'], 1)} "
                f"| {_f(p['p90_ttft'])} | {_f(tpot, 1)} | {_f(p['converge_s'], 1)} "
                f"| {_f(p['recovery_s'], 1)} |"
            )
    return "\n".join(lines)


def spread_table(rows: Sequence[dict[str, Any]]) -> str:
    """Goodput per mode over the repetitions: median and range, and against the best fixed limit
    of the same repetition (same seed, so the same arrivals)."""
    runs = _by_run(rows)
    lines = [
        f"| mode | goodput r/s, median of {len(runs)} | min | max | vs best fixed: median | min | max |",
        "|" + "---|" * 7,
    ]
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    for mode in modes:
        goodput, ratios = [], []
        for group in runs:
            mine = next((r for r in group if r["mode"] == mode), None)
            if mine is None:
                continue
            goodput.append(mine["goodput_rps"])
            fixed = _fixed(group)
            best = max((r["goodput_rps"] for r in fixed), default=0.0)
            if best > 0:
                ratios.append(mine["goodput_rps"] / best)
        ratio_cells = (
            " | ".join(_f(v, pct=True) for v in (median(ratios), min(ratios), max(ratios)))
            if ratios
            else "- | - | -"
        )
        lines.append(
            f"| {mode} | {_f(median(goodput), 1)} | {_f(min(goodput), 1)} | {_f(max(goodput), 1)} "
            f"| {ratio_cells} |"
        )
    return "\n".join(lines)


def _median_range(values: Sequence[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return _f(values[0], 1)
    return f"{_f(median(values), 1)} ({_f(min(values), 1)}-{_f(max(values), 1)})"


def summary_table(by_scenario: dict[str, list[dict[str, Any]]], titles: dict[str, str]) -> str:
    """One row per scenario: each mode's goodput (median and range over the repetitions), each
    adaptive mode against the best fixed limit of the same repetition, and how many repetitions
    passed each of the other targets (docs/benchmarks.md)."""
    modes = list(dict.fromkeys(r["mode"] for rows in by_scenario.values() for r in rows))
    adaptive = [m for m in modes if m in ADAPTIVE]
    head = ["scenario", *(f"{m} goodput r/s" for m in modes)]
    head += [f"{m} / best fixed, each run" for m in adaptive] + ["other targets, runs passed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rows in by_scenario.items():
        cells = [titles.get(name, name)]
        cells += [_median_range([r["goodput_rps"] for r in rows if r["mode"] == m]) for m in modes]
        groups = _by_run(rows)
        for mode in adaptive:
            ratios = []
            for group in groups:
                best = max((r["goodput_rps"] for r in _fixed(group)), default=0.0)
                mine = next((r["goodput_rps"] for r in group if r["mode"] == mode), None)
                if mine is not None and best > 0:
                    ratios.append(_f(mine / best, pct=True))
            cells.append(", ".join(ratios) or "-")
        passed: dict[str, list[bool]] = {}
        for group in groups:
            for what, ok, _ in _check_run(name, group):
                if "goodput" not in what:
                    passed.setdefault(what.removeprefix(f"{name} "), []).append(ok)
        cells.append("; ".join(f"{what} {sum(oks)}/{len(oks)}" for what, oks in passed.items()) or "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fixed(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["mode"].startswith("fixed-")]


def check_targets(by_scenario: dict[str, list[dict[str, Any]]]) -> list[tuple[str, bool, str]]:
    """(target, passed, numbers) for each adaptive mode and each of the project's targets.

    A scenario run several times passes a target only if every run passes it; the numbers of
    each run are given.
    """
    merged: dict[str, list[tuple[bool, str]]] = {}
    for name, rows in by_scenario.items():
        for group in _by_run(rows):
            for what, ok, numbers in _check_run(name, group):
                merged.setdefault(what, []).append((ok, numbers))
    results = []
    for what, outcomes in merged.items():
        if len(outcomes) == 1:
            results.append((what, *outcomes[0]))
            continue
        passed = sum(ok for ok, _ in outcomes)
        numbers = "; ".join(f"run {i + 1}: {n}" for i, (_, n) in enumerate(outcomes))
        results.append((what, passed == len(outcomes), f"{passed}/{len(outcomes)} runs pass; {numbers}"))
    return results


def _check_run(name: str, rows: Sequence[dict[str, Any]]) -> list[tuple[str, bool, str]]:
    results: list[tuple[str, bool, str]] = []
    fixed = _fixed(rows)
    best = max(fixed, key=lambda r: r["goodput_rps"]) if fixed else None
    for r in rows:
        if r["mode"] not in ADAPTIVE:
            continue
        if best is not None:
            results.append(_goodput_check(name, r, best))
        results.append(_converged_check(name, r))
        if name.startswith("b-"):
            results.append(_recovery_check(name, r))
        if name.startswith("d-"):
            results.append(_burst_check(name, r))
        if name.startswith("f-") and "tenants" in r:
            results.append(_fairness_check(name, r))
    return results


def _goodput_check(name: str, r: dict[str, Any], best: dict[str, Any]) -> tuple[str, bool, str]:
    ratio = r["goodput_rps"] / best["goodput_rps"] if best["goodput_rps"] else 1.0
    return (
        f"{name} [{r['mode']}] goodput >= 95% of best fixed",
        ratio >= 0.95,
        f"{r['goodput_rps']:.1f} vs {best['goodput_rps']:.1f} r/s ({best['mode']}): {100 * ratio:.0f}%",
    )


def _converged_check(name: str, r: dict[str, Any]) -> tuple[str, bool, str]:
    ttft, tpot = r["converged_p90_admitted_ttft"], r["converged_p90_tpot"]
    ok = ttft is not None and ttft <= 1.1 * SLA_TTFT and (tpot is None or tpot <= 1.1 * SLA_TPOT)
    return (
        f"{name} [{r['mode']}] admitted P90 within SLA+10% once converged",
        ok,
        f"TTFT {_f(ttft)} s (<= {1.1 * SLA_TTFT:.2f}), TPOT "
        f"{_f(None if tpot is None else 1000 * tpot, 1)} ms (<= {1100 * SLA_TPOT:.0f}); "
        f"converged after {_f(r['converge_s'], 1)} s",
    )


def _recovery_check(name: str, r: dict[str, Any]) -> tuple[str, bool, str]:
    rec = r["phases"][1]["recovery_s"]
    return (
        f"{name} [{r['mode']}] back under SLA within {RECOVERY_LIMIT_S:.0f} s after halving",
        rec is not None and rec <= RECOVERY_LIMIT_S,
        f"recovered after {_f(rec, 1)} s",
    )


def _burst_check(name: str, r: dict[str, Any]) -> tuple[str, bool, str]:
    answered = r["served"] + r["shed_with_retry_after"]
    rss, idle = r["peak_rss_mb"], r["idle_after_s"]
    ok = (
        answered == r["requests"]
        and r["errors"] == 0
        and rss is not None
        and rss < RSS_LIMIT_MB
        and idle is not None
    )
    return (
        f"{name} [{r['mode']}] burst answered, no errors, RSS < 300 MB, idle after",
        ok,
        f"{answered}/{r['requests']} answered ({r['served']} served, "
        f"{r['shed_with_retry_after']} shed with Retry-After), {r['errors']} errors, "
        f"peak RSS {_f(rss, 0)} MB, idle {_f(idle, 1)} s after",
    )


def _fairness_check(name: str, r: dict[str, Any]) -> tuple[str, bool, str]:
    share = r["tenants"].get("flood", {}).get("served_share", 0.0)
    interactive = r["tenants"].get("interactive", {})
    return (
        f"{name} [{r['mode']}] flooding tenant held to its share (50%)",
        share <= 0.5 * FAIR_TOLERANCE,
        f"flood got {100 * share:.0f}% of requests served while the load ran "
        f"(interactive: {interactive.get('served', 0)} served, {interactive.get('requests', 0)} asked)",
    )


def single_fixed_check(by_scenario: dict[str, list[dict[str, Any]]]) -> list[str]:
    """For each fixed limit: in how many scenario runs it reached 95% of that run's best fixed."""
    lines = []
    modes = sorted(
        {r["mode"] for rows in by_scenario.values() for r in _fixed(rows)}, key=lambda m: int(m.split("-")[1])
    )
    groups = [group for rows in by_scenario.values() for group in _by_run(rows)]
    for mode in modes:
        hits, worst = 0, 1.0
        for group in groups:
            fixed = _fixed(group)
            best = max(r["goodput_rps"] for r in fixed) if fixed else 0.0
            mine = next((r["goodput_rps"] for r in fixed if r["mode"] == mode), None)
            if mine is None or best <= 0:
                continue
            worst = min(worst, mine / best)
            hits += mine >= 0.95 * best
        lines.append(
            f"{mode}: >= 95% of the best fixed in {hits}/{len(groups)} scenario runs "
            f"(worst {100 * worst:.0f}%)"
        )
    return lines
