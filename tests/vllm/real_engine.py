"""Helpers shared by the real-engine suite: the engine/gateway handles and metric reading."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import httpx

from gateway.pool.vllm_metrics import parse_vllm_metrics
from loadtests.engine_metrics import Metrics, parse_metrics

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts" / "vllm_cpu"


def load_script(name: str) -> ModuleType:
    """Import scripts/vllm_cpu/<name>.py (scripts are not a package)."""
    module_name = f"vllm_cpu_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Engine:
    base_url: str
    model: str
    kv_tokens: int
    """num_gpu_blocks x block_size, as the engine reports in vllm:cache_config_info."""


@dataclass(frozen=True)
class Gateway:
    base_url: str
    engine: Engine


def engine_metrics(base_url: str) -> Metrics:
    return parse_metrics(httpx.get(base_url + "/metrics", timeout=10).text)


def kv_tokens_from_cache_config(base_url: str) -> int:
    """KV capacity from the labels of vllm:cache_config_info, read as the gateway reads it."""
    capacity = parse_vllm_metrics(httpx.get(base_url + "/metrics", timeout=10).text).kv_capacity_tokens
    if capacity is None:
        raise AssertionError("the engine exports no vllm:cache_config_info")
    return capacity


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
