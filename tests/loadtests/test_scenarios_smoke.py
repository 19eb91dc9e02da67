"""Smoke test of the scenario benchmark harness: a few seconds of overload through a real gateway."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from loadtests.scenarios.analysis import summarize
from loadtests.scenarios.definitions import CAPACITY_RPS, SLA_TPOT, SLA_TTFT, STANDARD, Scenario, Stream
from loadtests.scenarios.plots import plot_run
from loadtests.scenarios.report import check_targets, table
from loadtests.scenarios.runner import run

FIELDS = {
    "goodput_rps",
    "served_rps",
    "attainment",
    "shed_share",
    "error_share",
    "p90_ttft",
    "p90_admitted_ttft",
    "p90_tpot",
    "p90_e2e",
    "converge_s",
    "peak_rss_mb",
    "idle_after_s",
    "phases",
    "shed_reasons",
    "error_kinds",
}


@pytest.mark.slow
def test_overload_through_gateway_is_fully_answered(tmp_path: Path) -> None:
    scenario = Scenario(
        "smoke",
        "smoke: 2x overload",
        4.0,
        (Stream(STANDARD, "open", rate=2 * CAPACITY_RPS),),
        drain=15.0,
    )
    data = run(scenario, "sla")
    row = summarize(data)

    assert row.keys() >= FIELDS
    assert row["requests"] > 50
    # Every request got an answer: served, or refused by the gateway with a Retry-After.
    outcomes = {r.outcome for r in data.records}
    assert outcomes <= {"ok", "shed"}, row["error_kinds"]
    assert row["served"] > 0
    shed = [r for r in data.records if r.outcome == "shed"]
    assert all(r.retry_after is not None and r.shed_reason for r in shed)
    served = [r for r in data.records if r.outcome == "ok"]
    assert all(r.ttft is not None and r.output_tokens > 0 for r in served)
    # The sampler saw the gateway's limits and the engines' KV usage; the gateway went idle.
    assert any(b.limit is not None for t in data.ticks for b in t.backends)
    assert any(b.kv_usage is not None for t in data.ticks for b in t.backends)
    assert row["peak_rss_mb"] is not None and row["peak_rss_mb"] > 0
    assert row["idle_after_s"] is not None

    png = plot_run(data, tmp_path / "smoke.png")
    assert png.stat().st_size > 10_000
    assert "| sla |" in table([row])
    checks = check_targets({"smoke": [row]})
    assert any("admitted P90" in what for what, _, _ in checks)


def test_scaled_scenario_shortens_every_time() -> None:
    scenario = Scenario("x", "x", 40.0, (Stream(STANDARD),), phases=((0.0, "a"), (20.0, "b")))
    half = scenario.scaled(0.5)
    assert half.duration == 20.0 and half.phases == ((0.0, "a"), (10.0, "b"))
    assert dataclasses.replace(half, duration=40.0).phases[1][0] == 10.0


def test_default_drain_lets_the_slowest_request_within_the_sla_finish() -> None:
    # 2 s to the first token, then 256 tokens (the standard output's cap) at 30 ms, and a second.
    scenario = Scenario("x", "x", 10.0, (Stream(STANDARD),))
    assert scenario.drain_seconds == pytest.approx(SLA_TTFT + 256 * SLA_TPOT + 1.0)
    assert dataclasses.replace(scenario, drain=0.0).drain_seconds == 0.0
