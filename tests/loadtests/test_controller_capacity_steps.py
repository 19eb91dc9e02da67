"""The capacity-step sweep's report: one table row per step time and how many were followed."""

from __future__ import annotations

import pytest

from loadtests.controller import capacity_steps


def test_the_report_has_a_row_per_step_time_and_the_count(capsys: pytest.CaptureFixture[str]) -> None:
    capacity_steps.main(["--first", "55", "--last", "60", "--every", "5"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 5") or line.startswith("| 6")]
    assert [row.split("|")[1].strip() for row in rows] == ["55", "60"]
    assert all(row.rstrip().endswith("| yes |") for row in rows)
    assert "2 of 2 steps followed (clean," in out


def test_the_scheduled_limit_is_low_from_the_cut_until_the_restore() -> None:
    schedule = capacity_steps.Scheduled(high=9, low=4, cut_at=44.0, restore_at=100.0)
    assert [schedule.limit_at(t) for t in (0.0, 43.9, 44.0, 99.9, 100.0)] == [9, 9, 4, 4, 9]


def test_the_oracle_cuts_at_each_delay_and_a_later_cut_never_does_better(
    capsys: pytest.CaptureFixture[str],
) -> None:
    capacity_steps.main(["--oracle", "--first", "40"])
    out = capsys.readouterr().out
    assert "best fixed limit: " in out
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| 40 |")]
    assert [float(row[2]) for row in rows] == list(capacity_steps.ORACLE_DELAYS)
    assert rows[0][-1].strip() == "yes"  # a cut at once to the half-speed best follows the step
    tpot = [float(row[3]) for row in rows]
    assert tpot == sorted(tpot)
