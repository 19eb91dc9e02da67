"""Fixtures for the opt-in suite against a real vLLM engine on the CPU (`make test-vllm`).

The engine is vLLM's own OpenAI server from the environment that scripts/vllm_cpu/install.sh
builds (VLLM_VENV, default ~/.cache/llm-gateway/vllm-venv), serving a tiny random-weight Llama
with an 8,192-token KV cache. It starts once per session on a free loopback port and is stopped
by its process id at the end. VLLM_BASE_URL points the suite at an engine that is already
running instead (for example the one `make vllm-cpu` starts).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from real_engine import (
    ROOT,
    Engine,
    Gateway,
    kv_tokens_from_cache_config,
    load_script,
    log_tail,
)

from tests.procs import free_port

ENGINE_START_TIMEOUT_S = 600.0
GATEWAY_START_TIMEOUT_S = 60.0


@pytest.fixture(scope="session")
def vllm_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    existing = os.environ.get("VLLM_BASE_URL")
    if existing:
        existing = existing.rstrip("/")
        model = httpx.get(existing + "/v1/models", timeout=10).json()["data"][0]["id"]
        yield Engine(existing, model, kv_tokens_from_cache_config(existing))
        return

    engine = load_script("engine")
    venv = Path(os.environ.get("VLLM_VENV", str(engine.CACHE / "vllm-venv")))
    if not (venv / "bin" / "python").is_file():
        pytest.fail(
            f"no vLLM environment at {venv}: run `make test-vllm` (it installs one) "
            "or scripts/vllm_cpu/install.sh",
            pytrace=False,
        )
    work = tmp_path_factory.mktemp("vllm")
    settings = engine.EngineSettings(venv=venv, model_dir=work / "tiny-llama", port=free_port())
    log_path = work / "engine.log"
    with log_path.open("wb") as log:
        proc = engine.start(settings, log)
        try:
            try:
                engine.wait_ready(settings, proc, timeout=ENGINE_START_TIMEOUT_S)
            except engine.EngineError as error:
                pytest.fail(f"{error}\n--- engine log ---\n{log_tail(log_path)}", pytrace=False)
            yield Engine(
                settings.base_url,
                settings.served_model_name,
                kv_tokens_from_cache_config(settings.base_url),
            )
        finally:
            engine.stop(proc)


GatewayFactory = Callable[..., Gateway]


@pytest.fixture(scope="session")
def start_gateway(vllm_engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayFactory]:
    """Start `llm-gateway serve --backend ENGINE` with extra flags; all stopped at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    logs = tmp_path_factory.mktemp("gateway")

    def start(*flags: str) -> Gateway:
        port = free_port()
        log_path = logs / f"gateway-{port}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gateway.cli",
                    "serve",
                    "--backend",
                    vllm_engine.base_url,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    *flags,
                ],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        procs.append(proc)
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + GATEWAY_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"gateway exited\n{log_tail(log_path)}", pytrace=False)
            try:
                models = httpx.get(base_url + "/v1/models", timeout=5).json()
                if any(m["id"] == vllm_engine.model for m in models.get("data", [])):
                    return Gateway(base_url, vllm_engine)
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        pytest.fail(f"gateway not ready at {base_url}\n{log_tail(log_path)}", pytrace=False)

    try:
        yield start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=15)


@pytest.fixture(scope="session")
def gateway(start_gateway: GatewayFactory) -> Gateway:
    """One gateway for the API tests, with the default SLA controller."""
    return start_gateway("--sla-ttft-p90", "1.0", "--max-queue", "64", "--queue-timeout", "60")
