"""A careless config: NaN, infinities, values out of range, backoffs the wrong way round.

YAML reads `.nan` and `.inf` as numbers. `check-config` used to accept them: `queue.timeout: .nan`
made every request a plain-text 500, `shutdown_grace: .inf` crashed `serve`, `health.interval: .nan`
killed the health loop without a word. Every number is now checked, one line per problem, exit 2,
and `serve` refuses the same file the same way.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

NUMBERS = {
    "listen": [
        "port",
        "header_timeout",
        "body_timeout",
        "body_min_rate",
        "write_timeout",
        "keep_alive_timeout",
        "max_header_bytes",
        "send_buffer",
    ],
    "sla": ["ttft_p90", "tpot_p90", "e2e_p90"],
    "controller": ["interval", "window_seconds", "min_samples"],
    "queue": ["max_depth", "timeout"],
    "timeouts": ["connect", "first_byte", "idle"],
    "health": ["interval", "failure_threshold", "backoff_initial", "backoff_max"],
    "state": ["lease_seconds", "timeout"],
    "batch": ["max_file_bytes", "max_lines", "max_attempts", "interactive_horizon"],
    "": ["max_body_bytes", "retries", "shutdown_grace"],
}
BACKEND = ["min_concurrency", "max_concurrency"]
TENANT = ["weight", "priority", "max_priority", "queue_timeout"]


def config_with(value: float) -> tuple[dict[str, object], list[str]]:
    """A config with `value` in every numeric setting, and the dotted path of each."""
    data: dict[str, object] = {
        "backends": [{"url": "http://127.0.0.1:1", **{k: value for k in BACKEND}}],
        "tenants": [{"name": "t", "api_keys": ["k"], **{k: value for k in TENANT}}],
    }
    paths = [f"backends[0].{k}" for k in BACKEND] + [f"tenants[0].{k}" for k in TENANT]
    for section, keys in NUMBERS.items():
        if section:
            data[section] = {k: value for k in keys}
        else:
            data.update({k: value for k in keys})
        paths += [f"{section}.{k}" if section else k for k in keys]
    return data, paths


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_every_number_must_be_finite_one_line_each(tmp_path: Path, value: float) -> None:
    data, paths = config_with(value)
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(data))
    assert ".nan" in path.read_text() or ".inf" in path.read_text()
    out = run_cli("check-config", str(path))
    assert out.returncode == 2
    lines = out.stdout.strip().splitlines()
    for key in paths:
        mine = [line for line in lines if f": {key}: " in line]
        assert len(mine) == 1, (key, lines)
        assert "finite" in mine[0] or "integer" in mine[0], mine[0]
    assert len(lines) == len(paths), lines


def test_serve_refuses_a_nan_timeout_and_an_infinite_grace(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("backends: [http://127.0.0.1:1]\nqueue: {timeout: .nan}\nshutdown_grace: .inf\n")
    out = run_cli("serve", "--config", str(path))
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "llm-gateway: queue.timeout: must be a finite number, got nan",
        "llm-gateway: shutdown_grace: must be a finite number, got inf",
    ]


def test_out_of_range_values_and_backoffs_the_wrong_way_round(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "backends: [http://127.0.0.1:1]\n"
        "health: {backoff_initial: 60, backoff_max: 5}\n"
        "timeouts: {first_byte: 1.0e+12}\n"
        "tenants: [{name: t, api_keys: [k], priority: 2, max_priority: 1}]\n"
        "headers: {pass: [authorization]}\n"
    )
    out = run_cli("check-config", str(path))
    assert out.returncode == 2
    assert out.stdout.strip().splitlines() == [
        f"{path}: timeouts.first_byte: must be <= 86400, got 1000000000000.0",
        f"{path}: health.backoff_initial: 60 is above backoff_max 5",
        f"{path}: headers.pass: 'authorization' is not a header the gateway drops "
        "(api-key, cookie, openai-organization, openai-project, x-api-key)",
        f"{path}: tenants[0].max_priority: must be >= 2, got 1",
    ]
