"""The evaluation's plan: the fixed sweep around the KV knee and the interleaved order of runs."""

from __future__ import annotations

import pytest

from loadtests.controller import plan, runner
from loadtests.controller.matrix import Workload


def test_knee_is_where_the_requests_fill_the_kv_cache_at_most_max_num_seqs() -> None:
    long = Workload("long", "chat", True, (700, 700), (100, 100))
    short = Workload("short", "chat", True, (50, 50), (50, 50))
    assert plan.kv_knee(long, 8192, 32) == 8192 / 800
    assert plan.kv_knee(short, 8192, 32) == 32.0


def test_a_shared_prefix_is_counted_once() -> None:
    shared = Workload("shared", "chat", True, (700, 700), (100, 100), shared_prefix_tokens=600)
    assert plan.kv_knee(shared, 8192, 64) == (8192 - 600) / 200


def test_fixed_limits_are_an_eighth_and_a_quarter_of_the_knee_the_knee_and_twice_it() -> None:
    workload = Workload("w", "completions", True, (400, 400), (112, 112))  # knee 16
    assert plan.fixed_limits(workload, 8192, 32) == [2, 4, 16, 32]
    capped = Workload("c", "completions", True, (50, 50), (50, 50))  # knee capped at max_num_seqs
    assert plan.fixed_limits(capped, 8192, 32) == [4, 8, 32, 64]
    assert plan.fixed_limits(workload, 8192, 32, (1.0, 2.0)) == [16, 32]


def test_runs_are_interleaved_every_mode_once_per_repetition_direct_first() -> None:
    workload = Workload("w", "completions", True, (400, 400), (112, 112))
    modes = plan.modes([8, 16], ["loose", "tight"], [plan.Controller("sla", "sla")])
    assert [m.name for m in modes] == ["direct", "fixed-8", "fixed-16", "sla-loose", "sla-tight"]
    order = [(r.repetition, r.mode.name) for r in plan.schedule(workload, modes, 3)]
    names = [m.name for m in modes]
    turned = names[:1] + names[:0:-1]  # direct first, the others reversed: new neighbours
    assert order == [(0, n) for n in names] + [(1, n) for n in turned] + [(2, n) for n in names]


def test_modes_can_be_restricted_by_kind() -> None:
    modes = plan.modes([8], ["tight"], [plan.Controller("aimd", "aimd")], only=["direct", "adaptive"])
    assert [(m.name, m.algorithm, m.level) for m in modes] == [
        ("direct", None, None),
        ("aimd-tight", "aimd", "tight"),
    ]


def test_a_controller_with_other_parameters_runs_beside_the_default_in_each_repetition() -> None:
    variant = plan.Controller.parse('u95=sla{"increase_below": 0.95}')
    assert variant == plan.Controller("u95", "sla", {"increase_below": 0.95})
    assert plan.Controller.parse("gradient") == plan.Controller("gradient", "gradient")
    modes = plan.modes([8], ["tight"], [plan.Controller.parse("sla"), variant], only=["adaptive"])
    assert [(m.name, m.algorithm) for m in modes] == [("sla-tight", "sla"), ("u95-tight", "sla")]
    config = runner.gateway_config("http://engine", modes[1], {"ttft": 1.0})
    assert config["controller"] == {"algorithm": "sla", "params": {"increase_below": 0.95}}
    with pytest.raises(ValueError):
        plan.Controller.parse('u95=sla{"increase_below"}')


def test_the_estimate_counts_every_run_its_drain_and_overheads() -> None:
    per_run = 15 + 25 + plan.DRAIN_SHARE * 12 + plan.RUN_OVERHEAD_S
    per_workload = 10 + plan.RUN_OVERHEAD_S
    assert plan.estimate_s(36, 2, 15, 25, 12, 10) == pytest.approx(36 * per_run + 2 * per_workload)
