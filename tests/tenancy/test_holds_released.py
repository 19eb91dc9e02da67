"""Every place among a tenant's concurrent requests is given back, whichever way a request ends:
completed, refused by the backend, or its client gone while queued, before its first token or
mid-stream."""

from __future__ import annotations

import asyncio
import random

import httpx

from tests.procs import spawn_gateway, spawn_sim

CONCURRENT = 4


async def request(client: httpx.AsyncClient, url: str, how: str, rng: random.Random) -> int:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "go " * rng.randint(1, 50)}],
        "max_tokens": rng.randint(5, 60),
        "stream": True,
    }
    try:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
            if how == "complete" or r.status_code != 200:
                await r.aread()
                return r.status_code
            async for _ in r.aiter_bytes():
                if how == "mid-stream":
                    break
            return r.status_code
    except httpx.TimeoutException:  # gave up while queued or before the first token
        return 0


def test_no_hold_outlives_its_request() -> None:
    with (
        spawn_sim("--model", "m", "--error-rate", "0.1") as sim,
        spawn_gateway(
            {
                "backends": [{"url": sim.url, "name": "sim"}],
                "controller": {"algorithm": "fixed", "params": {"limit": 2}},
                "tenants": [{"name": "t", "api_keys": ["k"], "max_concurrent": CONCURRENT}],
            },
            ready="/health",
        ) as gw,
    ):

        async def chaos() -> list[int]:
            rng = random.Random(5)
            headers = {"authorization": "Bearer k"}
            async with httpx.AsyncClient(headers=headers, timeout=30) as client:
                impatient = httpx.AsyncClient(headers=headers, timeout=0.05)
                try:
                    jobs = [
                        request(impatient if how == "timeout" else client, gw.url, how, rng)
                        for how in rng.choices(["complete", "mid-stream", "timeout"], k=60)
                    ]
                    statuses = await asyncio.gather(*jobs)
                finally:
                    await impatient.aclose()
                # Every place is free again once the gateway has seen the last disconnects:
                # CONCURRENT requests at once all get in.
                deadline = asyncio.get_running_loop().time() + 10
                while True:
                    again = [request(client, gw.url, "complete", rng) for _ in range(CONCURRENT)]
                    last = await asyncio.gather(*again)
                    if 429 not in last or asyncio.get_running_loop().time() > deadline:
                        return [*statuses, *last]
                    await asyncio.sleep(0.1)

        statuses = asyncio.run(chaos())
        assert 429 in statuses[:-CONCURRENT]  # the quota was reached during the chaos
        assert all(s in (200, 500) for s in statuses[-CONCURRENT:]), statuses[-CONCURRENT:]
