"""SIGTERM with 8 streams running and 42 requests queued: a shutdown under load.

A gateway with a fixed limit of 8 in front of a slow simulator (30 tokens/s per stream, so the
1,000-token streams outlast the 10 s grace) gets SIGTERM once all 50 are in. Reported: when the
queued requests were answered (seconds after the signal, the slowest of them) and with what, how
the running streams ended ("done" with [DONE], "error event" in-band, or "cut" without either),
the exit status, how long the process took to exit, and tracebacks in its log.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import orjson
import yaml

from tests.procs import Proc, free_port, spawn, spawn_sim

GRACE = 10.0
RUNNING, QUEUED = 8, 42


async def one(client: httpx.AsyncClient, max_tokens: int, signalled: list[float]) -> tuple[str, float]:
    body = {
        "model": "tiny-llama",
        "prompt": "go",
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }
    data = b""
    try:
        async with client.stream("POST", "/v1/completions", json=body) as resp:
            async for chunk in resp.aiter_bytes():
                data += chunk
        if resp.status_code != 200:
            code = orjson.loads(data)["error"]["code"] if data.startswith(b"{") else data[:30].decode()
            outcome = f"{resp.status_code} {code}" + (
                " + Retry-After" if "retry-after" in resp.headers else ""
            )
        elif data.rstrip().endswith(b"data: [DONE]"):
            outcome = "done"
        else:
            outcome = "error event" if b'data: {"error"' in data else "cut"
    except httpx.HTTPError as exc:
        outcome = f"cut ({type(exc).__name__})"
    return outcome, time.monotonic() - (signalled[0] if signalled else time.monotonic())


async def until(client: httpx.AsyncClient, inflight: int, depth: int) -> None:
    for _ in range(600):
        state = (await client.get("/admin/state")).json()
        now = sum(b["inflight"] for b in state["backends"]), sum(m["depth"] for m in state["models"].values())
        if now == (inflight, depth):
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the gateway never had {inflight} running and {depth} queued")


async def run_one(root: Path, sim: Proc) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = {
        "listen": {"host": "127.0.0.1", "port": port},
        "backends": [sim.url],
        "controller": {"algorithm": "fixed", "params": {"limit": RUNNING}},
        "queue": {"timeout": 120},
        "shutdown_grace": GRACE,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(config, f)
        f.flush()
        cmd = [sys.executable, "-m", "gateway.cli", "serve", "--config", f.name, "--log-level", "info"]
        with spawn(cmd, f"{url}/v1/models", 30, base_url=url, cwd=root) as gw:
            signalled: list[float] = []
            async with httpx.AsyncClient(
                base_url=url, timeout=120, limits=httpx.Limits(max_connections=100)
            ) as c:
                running = [asyncio.create_task(one(c, 1000, signalled)) for _ in range(RUNNING)]
                await until(c, RUNNING, 0)
                queued = [asyncio.create_task(one(c, 5, signalled)) for _ in range(QUEUED)]
                await until(c, RUNNING, QUEUED)
                signalled.append(time.monotonic())
                os.kill(gw.pid, signal.SIGTERM)
                shed = await asyncio.gather(*queued)
                ended = await asyncio.gather(*running)
            status = await asyncio.to_thread(gw.popen.wait, GRACE + 30)
            exited = time.monotonic() - signalled[0]
            tracebacks = gw.stderr().count("Traceback")
    return (
        f"| {max(at for _, at in shed):.2f} s | {describe(shed)} | {describe(ended)} "
        f"| {status} | {exited:.1f} s | {tracebacks} |"
    )


def describe(outcomes: list[tuple[str, float]]) -> str:
    return ", ".join(f"{n} {what}" for what, n in Counter(o for o, _ in outcomes).most_common())


async def shutdown_table(checkouts: list[tuple[str, Path]]) -> str:
    lines = [
        f"SIGTERM with {RUNNING} streams running and {QUEUED} queued, shutdown_grace {GRACE:g} s:",
        "",
        "| gateway | queue answered within | queued requests got | running streams | exit status "
        "| exited after | tracebacks |",
        "|---|---:|---|---|---:|---:|---:|",
    ]
    with spawn_sim("--profile", "tiny-cpu", "--speed", "0.1") as sim:
        for label, root in checkouts:
            print(f"shutdown: {label} gateway ...", file=sys.stderr, flush=True)
            lines.append(f"| {label} " + await run_one(root, sim))
    return "\n".join(lines)
