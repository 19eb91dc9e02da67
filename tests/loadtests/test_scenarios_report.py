"""The scenario report: repeated runs are compared run by run and a target must hold in every run."""

from __future__ import annotations

from typing import Any

from loadtests.scenarios.report import check_targets, single_fixed_check, spread_table, summary_table, table


def row(mode: str, goodput: float, run: int, runs: int, tpot: float = 0.025) -> dict[str, Any]:
    return {
        "mode": mode,
        "run": run,
        "runs": runs,
        "goodput_rps": goodput,
        "served_rps": goodput,
        "attainment": 1.0,
        "shed_share": 0.0,
        "error_share": 0.0,
        "p90_ttft": 0.5,
        "p90_admitted_ttft": 0.5,
        "p90_tpot": tpot,
        "converge_s": 1.0,
        "peak_rss_mb": 50.0,
        "converged_p90_admitted_ttft": 0.5,
        "converged_p90_tpot": tpot,
        "phases": [],
    }


def three_runs() -> list[dict[str, Any]]:
    # Run 2 is a slow one for everybody: adaptive is compared with fixed-16 of the same run.
    return [
        row("fixed-16", 10.0, 0, 3),
        row("sla", 9.8, 0, 3),
        row("fixed-16", 8.0, 1, 3),
        row("sla", 7.9, 1, 3),
        row("fixed-16", 10.0, 2, 3),
        row("sla", 9.0, 2, 3, tpot=0.04),
    ]


def test_a_target_passes_only_if_every_run_passes_it() -> None:
    results = {what: (ok, numbers) for what, ok, numbers in check_targets({"x": three_runs()})}
    ok, numbers = results["x [sla] goodput >= 95% of best fixed"]
    assert not ok and numbers.startswith("2/3 runs pass; run 1: 9.8 vs 10.0")
    assert "run 3: 9.0 vs 10.0 r/s (fixed-16): 90%" in numbers
    ok, numbers = results["x [sla] admitted P90 within SLA+10% once converged"]
    assert not ok and "TPOT 40.0 ms" in numbers


def test_a_single_run_reads_as_before() -> None:
    rows = [row("fixed-16", 10.0, 0, 1), row("sla", 9.8, 0, 1)]
    results = check_targets({"x": rows})
    assert ("x [sla] goodput >= 95% of best fixed", True, "9.8 vs 10.0 r/s (fixed-16): 98%") in results
    assert "| sla |" in table(rows)


def test_the_spread_is_against_the_best_fixed_of_the_same_run() -> None:
    text = spread_table(three_runs())
    assert "| sla | 9.0 | 7.9 | 9.8 | 98% | 90% | 99% |" in text
    assert "| fixed-16 | 10.0 | 8.0 | 10.0 | 100% | 100% | 100% |" in text
    assert "| sla #3 |" in table(three_runs())


def test_single_fixed_limits_are_judged_per_run() -> None:
    rows = [*three_runs(), row("fixed-8", 9.6, 0, 3), row("fixed-8", 8.0, 1, 3), row("fixed-8", 9.0, 2, 3)]
    lines = single_fixed_check({"x": rows})
    assert lines == [
        "fixed-8: >= 95% of the best fixed in 2/3 scenario runs (worst 90%)",
        "fixed-16: >= 95% of the best fixed in 3/3 scenario runs (worst 100%)",
    ]


def test_the_summary_row_gives_each_mode_and_each_run_against_the_best_fixed() -> None:
    text = summary_table({"x": three_runs()}, {"x": "(x) a scenario"})
    header, _, line = text.splitlines()
    assert header.startswith("| scenario | fixed-16 goodput r/s | sla goodput r/s | sla / best fixed")
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:4] == ["(x) a scenario", "10.0 (8.0-10.0)", "9.0 (7.9-9.8)", "98%, 99%, 90%"]
    assert cells[4] == "[sla] admitted P90 within SLA+10% once converged 2/3"
