"""The real vLLM engine for benchmarks: started on a free loopback port and stopped by its pid.

`engine_server` yields the base URL of an engine: the one given, or one started from VLLM_VENV
(scripts/vllm_cpu/install.sh) with the tiny random-weight Llama of scripts/vllm_cpu/engine.py,
whose process group is stopped when the block ends, on an error or a Ctrl-C too. `engine_info`
reads what a benchmark needs to size its load: the served model, `max_model_len` (from
/v1/models) and the KV capacity in tokens (from vllm:cache_config_info, as the gateway reads it).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gateway.pool.vllm_metrics import parse_vllm_metrics
from tests.procs import free_port
from tests.vllm.real_engine import load_script


@dataclass(frozen=True, slots=True)
class EngineInfo:
    url: str
    model: str
    max_model_len: int | None
    kv_tokens: int | None


@contextmanager
def engine_server(given: str | None, hidden_size: int = 768, layers: int = 4, nice: int = 0) -> Iterator[str]:
    if given:
        yield given.rstrip("/")
        return
    engine = load_script("engine")
    venv = Path(os.environ.get("VLLM_VENV", str(engine.CACHE / "vllm-venv")))
    settings = engine.EngineSettings(
        venv=venv,
        model_dir=engine.CACHE / f"tiny-llama-{hidden_size}x{layers}",
        port=free_port(),
        hidden_size=hidden_size,
        layers=layers,
        nice=nice,
    )
    with open(os.devnull, "wb") as log:
        proc = engine.start(settings, log)
        try:
            engine.wait_ready(settings, proc)
            yield settings.base_url
        finally:
            engine.stop(proc)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body


def served_model(url: str) -> str:
    return str(json.loads(_get(url + "/v1/models"))["data"][0]["id"])


def engine_info(url: str) -> EngineInfo:
    model = json.loads(_get(url + "/v1/models"))["data"][0]
    scrape = parse_vllm_metrics(_get(url + "/metrics").decode())
    length = model.get("max_model_len")
    return EngineInfo(url, str(model["id"]), int(length) if length else None, scrape.kv_capacity_tokens)
