"""The servers a client-side SLA run talks to, started on free loopback ports and stopped by pid.

The engine is the real vLLM CPU engine of scripts/vllm_cpu/engine.py (its own session, niced) or
`llm-gateway sim` with a profile; the gateway is `llm-gateway serve --config` from a given checkout
(this one, or another branch's worktree with its own .venv), so the same harness measures the
gateway before and after a change. The simulator counts prompt tokens as UTF-8 bytes over
`bytes_per_token` (gateway/sim/tokens.py), so it is given the bytes per token that the client's
tokenizer makes of the client's prompts: then the simulator sees the prompt lengths the client
meant and the real engine counts.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import yaml

from loadtests.vllm_engine import engine_server
from tests.procs import ROOT, Proc, free_port, spawn, spawn_sim


@contextmanager
def real_engine(url: str | None, nice: int) -> Iterator[str]:
    """The CPU engine's base URL: `url`, or one started from VLLM_VENV at niceness `nice`."""
    with engine_server(url, nice=nice) as base:
        yield base


@contextmanager
def simulator(profile: str, model: str, bytes_per_token: float) -> Iterator[str]:
    with spawn_sim(
        "--profile", profile, "--model", model, "--bytes-per-token", f"{bytes_per_token:.4f}", timeout=60
    ) as proc:
        yield proc.url


def gateway_config(engine_url: str, ttft_s: float, tpot_s: float, limit: int | None) -> dict[str, object]:
    """Everything default but the backend, the SLA and, for `limit`, the fixed algorithm."""
    config: dict[str, object] = {"backends": [engine_url], "sla": {"ttft_p90": ttft_s, "tpot_p90": tpot_s}}
    if limit is not None:
        config["controller"] = {"algorithm": "fixed", "params": {"limit": limit}}
    return config


def start_gateway(config: Mapping[str, object], checkout: Path = ROOT, timeout: float = 60.0) -> Proc:
    """`llm-gateway serve --config` from `checkout` (its .venv), ready once /admin/state answers."""
    port = free_port()
    full = {**config, "listen": {"host": "127.0.0.1", "port": port}}
    fd, path = tempfile.mkstemp(suffix=".yaml", prefix="client-sla-")
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(full, f)
    python = checkout / ".venv" / "bin" / "python"
    cmd = [str(python if python.exists() else sys.executable), "-m", "gateway.cli", "serve"]
    cmd += ["--config", path, "--log-level", "warning"]
    base = f"http://127.0.0.1:{port}"
    try:
        return spawn(cmd, f"{base}/admin/state", timeout, base_url=base, cwd=checkout)
    finally:
        os.unlink(path)
