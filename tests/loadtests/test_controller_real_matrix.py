"""The real-engine evaluation's command line: run lengths, the fixed sweep, the estimate, targets
kept from an earlier run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests.controller import plan, real_matrix


def test_every_mode_gets_the_same_long_warm_up_and_window() -> None:
    default = real_matrix.parse_args([])
    assert (default.warmup, default.window, default.repeat) == (15.0, 25.0, 3)
    quick = real_matrix.parse_args(["--quick"])
    assert (quick.warmup, quick.window) == (10.0, 15.0)
    assert real_matrix.parse_args(["--quick", "--repeat", "1"]).repeat == 1


def test_the_estimate_counts_the_runs_of_the_plan() -> None:
    args = real_matrix.parse_args(
        ["--workloads", "chat-short,chat-long-prompt", "--fixed-factors", "0.25,1,2"]
    )
    assert args.fixed_factors == [0.25, 1.0, 2.0]
    runs = 2 * 3 * (1 + 3 + 3)  # workloads x repetitions x (direct, fixed, one adaptive per level)
    assert real_matrix.estimate_s(args) == plan.estimate_s(runs, 2, 15.0, 25.0, 12.0, 10.0)


def test_direct_cannot_be_left_out_it_sets_the_levels(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        real_matrix.parse_args(["--modes", "fixed,adaptive"])
    assert "direct" in capsys.readouterr().err


def test_a_workload_of_ones_own_runs_alone_or_beside_named_ones() -> None:
    spec = "rag:chat:stream:700-800:20-40:prefix=600"
    alone = real_matrix.parse_args(["--workload", spec])
    assert [w.name for w in alone.workload_list] == ["rag"]
    both = real_matrix.parse_args(["--workloads", "chat-short", "--workload", spec])
    assert [w.name for w in both.workload_list] == ["chat-short", "rag"]
    assert len(real_matrix.parse_args([]).workload_list) == 6


def test_a_malformed_workload_is_refused_with_what_is_wrong(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        real_matrix.parse_args(["--workload", "rag:chat:stream:700-800:20-40:prefix=900"])
    assert "shared prefix exceeds the shortest prompt" in capsys.readouterr().err


def earlier_run(tmp_path: Path, targets: dict[str, dict[str, float]]) -> Path:
    """A summary.json as an earlier run writes it (targets and the P90s behind them per workload)."""
    path = tmp_path / "summary.json"
    saved = {
        "targets": {"chat-short": targets},
        "p90s": {"chat-short": {"unloaded": {"ttft": 0.03}, "loaded": {"ttft": 1.4}}},
        "runs": [],
    }
    path.write_text(json.dumps(saved))
    return path


def test_targets_from_an_earlier_run_are_kept_for_its_workloads(tmp_path: Path) -> None:
    levels = {"loose": {"ttft": 2.0}, "tight": {"ttft": 0.221}, "infeasible": {"ttft": 0.1}}
    args = real_matrix.parse_args(["--targets-from", str(earlier_run(tmp_path, levels))])
    assert args.given_targets["chat-short"]["targets"]["tight"] == {"ttft": 0.221}
    assert args.given_targets["chat-short"]["p90s"]["unloaded"] == {"ttft": 0.03}
    assert "chat-long-prompt" not in args.given_targets  # measured as usual
    assert real_matrix.parse_args([]).given_targets == {}


def test_targets_from_a_run_without_a_level_asked_for_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = earlier_run(tmp_path, {"loose": {"ttft": 2.0}})
    assert real_matrix.parse_args(["--targets-from", str(path), "--levels", "loose"]).given_targets
    with pytest.raises(SystemExit):
        real_matrix.parse_args(["--targets-from", str(path), "--levels", "loose,tight"])
    assert "'chat-short' has no targets for tight" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        real_matrix.parse_args(["--targets-from", str(tmp_path / "none.json")])
    assert "none.json" in capsys.readouterr().err
