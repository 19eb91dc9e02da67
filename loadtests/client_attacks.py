"""What careless or hostile clients do through the API itself, as attacks that last until stopped.

Each is `async (base_url, stop, count)`: it keeps going until `stop` is set and calls `count(what)`
for each answer, so a benchmark can run it beside a watcher of the gateway's memory and latency.

- `unknown_models`: requests naming a new 200-character model every time (each name was a metric
  series of its own, before unknown models were counted under one label);
- `oversized_names`: 1 MB model names and 16 KB request ids (both were echoed back);
- `sdk_bursts`: cold bursts of concurrent OpenAI SDK requests with default retries, one after the
  other, each from a child process (`loadtests.burst`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

Count = Callable[[str], None]
ROOT = Path(__file__).resolve().parent.parent


async def unknown_models(base_url: str, stop: asyncio.Event, count: Count, concurrency: int = 8) -> None:
    numbers = itertools.count()

    async def one_client(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            name = f"invented-{next(numbers)}-" + "x" * 200
            resp = await client.post("/v1/chat/completions", json={"model": name, "messages": []})
            count(f"unknown model: {resp.status_code}")

    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        await asyncio.gather(*(one_client(client) for _ in range(concurrency)))


async def oversized_names(base_url: str, stop: asyncio.Event, count: Count) -> None:
    body = {"model": "m" * 1_000_000, "messages": []}
    headers = {"x-request-id": "r" * 16_000}
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        while not stop.is_set():
            resp = await client.post("/v1/chat/completions", json=body, headers=headers)
            count(f"oversized: {resp.status_code}, {len(resp.content) + len(resp.headers.raw)} bytes back")


async def sdk_bursts(base_url: str, stop: asyncio.Event, count: Count, *, model: str, n: int = 5000) -> None:
    """Bursts one after the other, each sent by a child process (`python -m loadtests.burst`) so the
    5,000 clients do not share an event loop with whatever measures the gateway meanwhile."""
    while not stop.is_set():
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "loadtests.burst",
            base_url,
            model,
            "--requests",
            str(n),
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            out, _ = await child.communicate()
        finally:
            if child.returncode is None:  # cancelled: the burst ends with the attack
                child.kill()
                await child.wait()
        if child.returncode != 0:
            count(f"burst: client exited {child.returncode}")
            return
        s = json.loads(out)
        failed = ", ".join(f"{k} {v}" for k, v in s["failures"].items())
        count(
            f"burst: {s['served']} of {s['requests']} served in {s['attempts']} attempts, {s['seconds']} s"
            + (f" (not served: {failed})" if failed else "")
        )
