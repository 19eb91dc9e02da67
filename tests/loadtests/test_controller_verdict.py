"""Verdicts per cell against the controller's targets (loadtests/controller/verdict.py), from per-run
summaries."""

from __future__ import annotations

from loadtests.controller.verdict import RunSummary, judge

TARGETS = {"ttft": 1.0}


def summary(
    mode: str, rep: int, tp: float, gp: float, ttft: float, *, infeasible: bool | None = None
) -> RunSummary:
    kind = "direct" if mode == "direct" else "fixed" if mode.startswith("fixed") else "adaptive"
    level = "tight" if kind == "adaptive" else None
    return RunSummary("w", rep, mode, kind, level, tp, {"tight": gp}, {"ttft": ttft}, 0.2, infeasible)


def runs(adaptive: list[tuple[float, float, float]], infeasible: bool | None = None) -> list[RunSummary]:
    out = []
    for rep, (tp, gp, ttft) in enumerate(adaptive):
        out += [
            summary("direct", rep, 1000.0, 200.0, 5.0),
            summary("fixed-8", rep, 800.0, 780.0, 0.5),
            summary("fixed-16", rep, 950.0, 900.0, 0.9),
            summary("fixed-32", rep, 1000.0, 400.0, 3.0),
            summary("sla-tight", rep, tp, gp, ttft, infeasible=infeasible),
        ]
    return out


def test_the_best_fixed_limit_meeting_the_sla_is_the_reference() -> None:
    cell = judge(runs([(940.0, 900.0, 0.95)] * 3), "w", "tight", TARGETS)
    assert (cell.reference, cell.reference_goodput) == ("fixed-16", 900.0)
    assert cell.passed, cell.checks


def test_goodput_below_95_percent_of_the_reference_fails() -> None:
    cell = judge(runs([(940.0, 850.0, 0.95)] * 3), "w", "tight", TARGETS)
    failed = [name for name, ok, _ in cell.checks if not ok]
    assert failed == ["goodput"]


def test_p90_may_exceed_the_target_by_at_most_ten_percent() -> None:
    assert judge(runs([(940.0, 900.0, 1.09)] * 3), "w", "tight", TARGETS).passed
    cell = judge(runs([(940.0, 900.0, 1.2)] * 3), "w", "tight", TARGETS)
    assert [name for name, ok, _ in cell.checks if not ok] == ["ttft P90"]


def test_one_repetition_below_80_percent_of_direct_fails_even_if_the_median_passes() -> None:
    cell = judge(runs([(940.0, 900.0, 0.9), (950.0, 900.0, 0.9), (700.0, 900.0, 0.9)]), "w", "tight", TARGETS)
    assert [name for name, ok, _ in cell.checks if not ok] == ["worst repetition"]


def test_infeasible_cell_needs_the_report_in_every_repetition() -> None:
    targets = {"ttft": 0.1}  # nothing measured meets it
    reported = judge(runs([(950.0, 0.0, 0.5)] * 3, infeasible=True), "w", "tight", targets)
    assert reported.reference is None and reported.passed
    silent = judge(runs([(950.0, 0.0, 0.5)] * 3, infeasible=False), "w", "tight", targets)
    assert [name for name, ok, _ in silent.checks if not ok] == ["sla_infeasible"]
    absent = judge(runs([(950.0, 0.0, 0.5)] * 3), "w", "tight", targets)
    assert absent.infeasible_reports == "n/a" and not absent.passed


def test_missing_adaptive_runs_fail_rather_than_pass() -> None:
    only_fixed = [r for r in runs([(940.0, 900.0, 0.9)] * 3) if r.kind != "adaptive"]
    assert not judge(only_fixed, "w", "tight", TARGETS).passed


def test_where_meeting_the_sla_costs_throughput_goodput_is_the_target() -> None:
    # Only fixed-8 (goodput 780, below 90% of direct's 1,000) meets TTFT 0.6 s: the throughput
    # target cannot be met together with the SLA, so goodput against fixed-8 decides.
    targets = {"ttft": 0.6}
    cell = judge(runs([(800.0, 760.0, 0.55)] * 3), "w", "tight", targets)
    assert cell.reference == "fixed-8" and cell.passed, cell.checks
    short = judge(runs([(800.0, 700.0, 0.55)] * 3), "w", "tight", targets)
    assert [name for name, ok, _ in short.checks if not ok] == ["goodput"]


def test_an_sla_only_the_controller_met_is_feasible_and_judged_on_the_most_fixed_goodput() -> None:
    # TTFT 0.4 s: no fixed limit of the sweep meets it (fixed-8 reads 0.5 s), the controller does.
    targets = {"ttft": 0.4}
    cell = judge(runs([(950.0, 790.0, 0.35)] * 3), "w", "tight", targets)
    assert cell.feasible and cell.reference_goodput == 900.0 and not cell.passed
    assert [name for name, ok, _ in cell.checks if not ok] == ["goodput"]
    better = judge(runs([(900.0, 880.0, 0.35)] * 3), "w", "tight", targets)
    assert better.passed, better.checks
    missed = judge(runs([(900.0, 880.0, 0.5)] * 3, infeasible=False), "w", "tight", targets)
    assert not missed.feasible and not missed.passed
