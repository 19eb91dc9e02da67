"""SIGHUP and POST /admin/reload under load: backends added and removed, SLA, tenants and keys and
queue changed, with no request failed and the learned limit of a backend that stays kept; an
invalid file is refused with one log line and the running config kept."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import yaml

from tests.procs import Proc, free_port, spawn, spawn_sim

MODEL = "tiny-llama"


def write(path: Path, config: dict[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config))
    tmp.replace(path)


async def load(url: str, stop: asyncio.Event, served: Counter[str], failures: list[str]) -> None:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="key-1", max_retries=0, timeout=30)
    while not stop.is_set():
        try:
            raw = await client.completions.with_raw_response.create(model=MODEL, prompt="hi", max_tokens=8)
            served[raw.headers["x-gateway-backend"]] += 1
        except openai.OpenAIError as exc:
            failures.append(repr(exc))
    await client.close()


async def backend_state(admin: httpx.AsyncClient) -> dict[str, dict]:  # type: ignore[type-arg]
    return {b["name"]: b for b in (await admin.get("/admin/state")).json()["backends"]}


async def until(
    admin: httpx.AsyncClient,
    check: Callable[[dict[str, dict]], bool],
    what: str,  # type: ignore[type-arg]
) -> dict[str, dict]:  # type: ignore[type-arg]
    for _ in range(300):
        backends = await backend_state(admin)
        if check(backends):
            return backends
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def test_reload_under_load_fails_no_request_and_keeps_learned_limits(tmp_path: Path) -> None:
    port = free_port()
    path = tmp_path / "gateway.yaml"
    config: dict[str, object] = {
        "listen": {"host": "127.0.0.1", "port": port},
        "backends": [{"url": "", "name": "a"}],
        "controller": {"algorithm": "aimd", "params": {"initial": 2}, "interval": 0.1},
        "sla": {"ttft_p90": 10.0},
        "tenants": [{"name": "t1", "api_keys": ["key-1"]}],
        "headers": {"expose_backend": True},  # off by default with tenants
        "health": {"interval": 0.2},
    }
    with spawn_sim("--profile", "tiny-cpu") as a, spawn_sim("--profile", "tiny-cpu", "--seed", "2") as b:
        a_cfg, b_cfg = {"url": a.url, "name": "a"}, {"url": b.url, "name": "b"}
        write(path, {**config, "backends": [a_cfg]})
        cmd = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--log-level", "warning"]
        url = f"http://127.0.0.1:{port}"
        with spawn(cmd, f"{url}/admin/state", base_url=url) as gw:
            await exercise(gw, path, config, a_cfg, b_cfg)


async def exercise(gw: Proc, path: Path, config: dict, a_cfg: dict, b_cfg: dict) -> None:  # type: ignore[type-arg]
    stop, served, failures = asyncio.Event(), Counter[str](), []
    workers = [asyncio.create_task(load(gw.url, stop, served, failures)) for _ in range(6)]
    try:
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as admin:
            learned = await until(admin, lambda s: s["a"]["controlled"] >= 5, "a learned a limit")
            before = learned["a"]["controlled"]
            tenants = [
                {"name": "t1", "api_keys": ["key-1"], "weight": 2},
                {"name": "t2", "api_keys": ["key-2"]},
            ]
            write(
                path,
                {
                    **config,
                    "backends": [a_cfg, b_cfg],
                    "sla": {"ttft_p90": 20.0},
                    "tenants": tenants,
                    "queue": {"timeout": 20},
                },
            )
            os.kill(gw.pid, signal.SIGHUP)
            after = await until(admin, lambda s: "b" in s, "b added")
            assert after["a"]["controlled"] >= before  # kept, not back to the initial 2
            await until(admin, lambda s: s["b"]["in_rotation"] and served["b"] > 0, "b serving")
            key2 = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="key-2", max_retries=0)
            assert (await key2.completions.create(model=MODEL, prompt="x", max_tokens=2)).choices

            write(path, {**config, "backends": [b_cfg], "tenants": tenants})
            os.kill(gw.pid, signal.SIGHUP)
            await until(admin, lambda s: list(s) == ["b"], "a removed")
            on_b = served["b"]

            write(path, {**config, "backends": [{"url": "ftp://nowhere"}]})
            os.kill(gw.pid, signal.SIGHUP)
            refused = await admin.post("/admin/reload")
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_config"
            await until(admin, lambda s: list(s) == ["b"] and served["b"] > on_b + 20, "b still serving")
    finally:
        stop.set()
        await asyncio.gather(*workers)
    assert failures == []
    log = gw.stderr()
    assert log.count("config reload refused") == 2, log  # the signal and the POST, one line each
    assert "Traceback" not in log
    assert served["a"] > 0 and served["b"] > 0
