"""One small cell of the controller evaluation on the real engine: the harness end to end.

One workload, one level, one repetition of short runs: the unloaded run and the first direct run
set the targets, every mode delivers tokens through a fresh gateway or straight, the client stays
far from a full core, the raw records are written, and the cell gets a verdict with every check
filled in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from real_engine import Engine

from loadtests.controller import matrix, real_matrix, verdict
from loadtests.vllm_engine import engine_info

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]


def test_one_cell_runs_end_to_end(vllm_engine: Engine, tmp_path: Path) -> None:
    args = real_matrix.parse_args(
        ["--workloads", "completions-nonstream", "--levels", "tight", "--repeat", "1", "--quick"]
    )
    args.warmup, args.window, args.unloaded = 2.0, 4.0, 4.0
    (tmp_path / "raw").mkdir()
    workload = matrix.by_name("completions-nonstream")
    targets, runs, p90s = real_matrix.run_workload(
        workload, engine_info(vllm_engine.base_url), args, tmp_path
    )
    assert p90s["loaded"]["e2e"] == runs[0].p90["e2e"]
    assert targets["loose"]["e2e"] > targets["tight"]["e2e"] > targets["infeasible"]["e2e"] > 0
    # Fixed limits at a quarter of the KV knee, the knee and twice it.
    assert [r.kind for r in runs] == ["direct", "fixed", "fixed", "fixed", "adaptive"]
    assert all(r.throughput > 0 and r.failures == 0 for r in runs)
    assert all(r.client_cpu < 0.5 for r in runs)
    assert all(r.limit_mean is not None for r in runs if r.kind != "direct")
    assert len(list((tmp_path / "raw").glob("*.json"))) == len(runs)
    raw = json.loads(next((tmp_path / "raw").glob("*direct.json")).read_text())
    assert raw["records"] and raw["targets"]["tight"] == targets["tight"] and raw["p90s"] == p90s
    cell = verdict.judge(runs, workload.name, "tight", targets["tight"])
    checks = {name: detail for name, _, detail in cell.checks}
    # Throughput against direct, run by run, unless meeting the SLA costs it (the verdict says so).
    assert "worst repetition" in checks or checks["throughput"].startswith("not required")
    assert set(checks) >= ({"goodput", "e2e P90"} if cell.feasible else {"sla_infeasible"})
