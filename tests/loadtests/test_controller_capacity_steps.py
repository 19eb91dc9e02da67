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
