"""Keys after a reload: every route (inference, files, batches) reads the one table of tenants and
keys, so a rotated key stops working everywhere at once, and tenants added to a gateway that had
none close the Files and Batches API to clients without a key."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from tests.procs import Proc, free_port, spawn, spawn_sim

MODEL = "tiny-llama"


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    with spawn_sim("--profile", "tiny-cpu") as proc:
        yield proc


def gateway(path: Path, config: dict[str, object]) -> Proc:
    port = free_port()
    path.write_text(yaml.safe_dump({**config, "listen": {"host": "127.0.0.1", "port": port}}))
    cmd = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--log-level", "warning"]
    url = f"http://127.0.0.1:{port}"
    return spawn(cmd, f"{url}/health", base_url=url)


def reload(gw: Proc, path: Path, config: dict[str, object]) -> None:
    listen = yaml.safe_load(path.read_text())["listen"]
    path.write_text(yaml.safe_dump({**config, "listen": listen}))
    assert httpx.post(f"{gw.url}/admin/reload", timeout=10).json()["reloaded"]


def client(gw: Proc, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0)


def refused(gw: Proc, key: str) -> list[str]:
    """The routes that refuse `key` with 401."""
    c, out = client(gw, key), []
    calls = {
        "chat": lambda: c.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        ),
        "files": lambda: c.files.list(),
        "batches": lambda: c.batches.list(),
    }
    for name, call in calls.items():
        try:
            call()
        except openai.AuthenticationError:
            out.append(name)
    return out


def test_a_rotated_key_is_refused_by_every_route(sim: Proc, tmp_path: Path) -> None:
    config: dict[str, object] = {
        "backends": [sim.url],
        "batch": {"data_dir": str(tmp_path / "batch")},
        "tenants": [{"name": "t", "api_keys": ["old-key"]}],
    }
    with gateway(tmp_path / "gateway.yaml", config) as gw:
        uploaded = client(gw, "old-key").files.create(file=("in.jsonl", b""), purpose="batch").id
        reload(gw, tmp_path / "gateway.yaml", {**config, "tenants": [{"name": "t", "api_keys": ["new-key"]}]})
        assert refused(gw, "old-key") == ["chat", "files", "batches"]
        assert refused(gw, "new-key") == []
        assert [f.id for f in client(gw, "new-key").files.list()] == [uploaded]
        # With tenants, answers do not say which backend served them (headers.expose_backend).
        raw = client(gw, "new-key").chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        assert raw.http_response.status_code == 200 and "x-gateway-backend" not in raw.headers


def test_tenants_added_to_a_gateway_that_had_none_close_every_route(sim: Proc, tmp_path: Path) -> None:
    config: dict[str, object] = {"backends": [sim.url], "batch": {"data_dir": str(tmp_path / "batch")}}
    with gateway(tmp_path / "gateway.yaml", config) as gw:
        assert refused(gw, "any") == []
        reload(gw, tmp_path / "gateway.yaml", {**config, "tenants": [{"name": "t", "api_keys": ["t-key"]}]})
        assert refused(gw, "any") == ["chat", "files", "batches"]
        assert refused(gw, "t-key") == []
