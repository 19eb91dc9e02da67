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

from tests.procs import ROOT, Proc, free_port, spawn, spawn_sim
from tests.vllm.real_engine import load_script


@contextmanager
def real_engine(url: str | None, nice: int, ready_timeout: float = 1800.0) -> Iterator[str]:
    """The CPU engine's base URL: `url`, or one started from VLLM_VENV and niced to `nice` once ready.

    It starts at the harness's own priority and is niced when it answers: started niced on a busy
    host, it took over ten minutes to load (3% of a core), while only its serving is measured.
    """
    if url:
        yield url.rstrip("/")
        return
    engine = load_script("engine")
    venv = Path(os.environ.get("VLLM_VENV", str(engine.CACHE / "vllm-venv")))
    settings = engine.EngineSettings(venv=venv, model_dir=engine.CACHE / "tiny-llama-768x4", port=free_port())
    with open(os.devnull, "wb") as log:
        proc = engine.start(settings, log)
        try:
            engine.wait_ready(settings, proc, timeout=ready_timeout)
            renice_group(proc.pid, nice)
            engine.renice_session(proc.pid, nice)
            yield settings.base_url
        finally:
            engine.stop(proc)


def renice_group(pgid: int, nice: int) -> None:
    """Every thread of every process in the process group `pgid` to niceness `nice`."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            for task in (stat.parent / "task").iterdir():
                os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
        except (OSError, IndexError, ValueError):
            continue


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
