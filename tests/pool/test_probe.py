"""`check-config --probe`: what each backend answered, asked over loopback of a simulated vLLM."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from gateway.sim.app import VLLM_VERSION
from tests.procs import spawn_sim


def probe(tmp_path: Path, backends: list[object]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({"backends": backends, "timeouts": {"connect": 2}}))
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "check-config", "--probe", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_probe_reports_version_models_and_kv_capacity_and_exits_0(tmp_path: Path) -> None:
    with spawn_sim("--profile", "tiny-cpu", "--num-gpu-blocks", "48") as sim:
        result = probe(tmp_path, [{"url": sim.url, "name": "gpu-0"}])
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith("OK (1 backends, algorithm sla, SLA {'ttft': 1.0})")
    assert lines[1] == (
        f"gpu-0 ({sim.url}): reachable; vLLM {VLLM_VERSION}; models: tiny-llama; "
        "KV cache 6,144 tokens; engine metrics read"
    )
    assert len(lines) == 2


def test_probe_names_an_unreachable_backend_and_a_pinned_model_not_served(tmp_path: Path) -> None:
    with spawn_sim("--profile", "tiny-cpu") as sim:
        result = probe(
            tmp_path,
            [
                {"url": sim.url, "name": "up", "models": ["llama-70b"]},
                {"url": "http://127.0.0.1:9", "name": "down"},
            ],
        )
    assert result.returncode == 1
    out = result.stdout
    assert "up (" in out and "  models pinned in the config but not served: llama-70b" in out
    assert "down (http://127.0.0.1:9): NOT REACHABLE" in out
    assert "/health: ClientConnectorError" in out
