"""What careless or hostile clients do through the API itself, as attacks that last until stopped.

Each is `async (base_url, stop, count)`: it keeps going until `stop` is set and calls `count(what)`
for each answer, so a benchmark can run it beside a watcher of the gateway's memory and latency.

- `unknown_models`: requests naming a new 200-character model every time (each name was a metric
  series of its own, before unknown models were counted under one label);
- `oversized_names`: 1 MB model names and 16 KB request ids (both were echoed back);
- `sdk_bursts`: cold bursts of concurrent OpenAI SDK requests with default retries, one after the
  other (`loadtests.burst`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import httpx

from loadtests.burst import sdk_burst

Count = Callable[[str], None]


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
    while not stop.is_set():
        result = await sdk_burst(base_url, n, model)
        count(f"burst: {result.served} of {result.requests} served in {result.attempts} attempts")
