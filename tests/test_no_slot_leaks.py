"""No slot leaks: random client disconnects (queued, waiting for the first token, mid-stream), backend
errors and normal completions through the real gateway end with nothing in flight anywhere."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.procs import Proc, spawn_gateway, spawn_sim


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Proc, list[Proc]]]:
    with (
        spawn_sim("--profile", "tiny-cpu", "--error-rate", "0.1") as a,
        spawn_sim("--profile", "tiny-cpu") as b,
    ):
        config = {
            "backends": [{"url": a.url, "name": "a"}, {"url": b.url, "name": "b"}],
            "controller": {"algorithm": "fixed", "params": {"limit": 3}},
            "queue": {"max_depth": 400, "timeout": 20},
            "health": {"interval": 0.2, "failure_threshold": 1000},
        }
        with spawn_gateway(config) as gw:
            yield gw, [a, b]


async def one(client: httpx.AsyncClient, rng: random.Random, i: int) -> str:
    body = {
        "model": "tiny-llama",
        "prompt": f"request {i}",
        "max_tokens": rng.randint(1, 40),
        "ignore_eos": True,
        "stream": rng.random() < 0.7,
    }
    # Clients that would rather wait: the storm needs a deep queue to cancel requests in.
    headers = {"x-queue-timeout": "20"}
    async with client.stream("POST", "/v1/completions", json=body, headers=headers) as resp:
        async for _ in resp.aiter_bytes():
            pass
        return str(resp.status_code)


async def storm(base: str, n: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    outcomes: dict[str, int] = {}
    limits = httpx.Limits(max_connections=n)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
        tasks = [asyncio.create_task(one(client, rng, i)) for i in range(n)]
        # Once the queue holds a quarter of them, cancel a third at random moments: while queued,
        # before or during their stream. Waiting for the queue first makes sure some are queued
        # when cancelled, however slowly a busy machine delivers the requests to the gateway.
        await _queue_reaches(base, n // 4)
        for task in rng.sample(tasks, n // 3):
            asyncio.get_running_loop().call_later(rng.uniform(0.0, 1.5), task.cancel)
        for task in tasks:
            try:
                key = await task
            except asyncio.CancelledError:
                key = "cancelled"
            outcomes[key] = outcomes.get(key, 0) + 1
    return outcomes


def test_random_disconnects_and_errors_leak_no_slot(stack: tuple[Proc, list[Proc]]) -> None:
    gw, sims = stack
    outcomes = asyncio.run(storm(gw.url, 300, seed=7))
    assert outcomes.get("cancelled", 0) > 50 and outcomes.get("200", 0) > 50, outcomes
    assert outcomes.get("500", 0) > 0, outcomes  # the faulty backend's errors passed through
    deadline = time.monotonic() + 15
    while True:
        state = httpx.get(f"{gw.url}/admin/state").json()
        inflight = [b["inflight"] for b in state["backends"]]
        depth = state["models"]["tiny-llama"]["depth"]
        running = [_gauge(s, "vllm:num_requests_running") for s in sims]
        if (inflight, depth, running) == ([0, 0], 0, [0.0, 0.0]):
            break
        assert time.monotonic() < deadline, (inflight, depth, running)
        time.sleep(0.1)
    assert state["models"]["tiny-llama"]["cancelled"] > 0  # some left while queued


async def _queue_reaches(base: str, depth: int) -> None:
    """Wait until the gateway's queue holds `depth` requests (its own client: the storm's pool is full).

    The gateway offers no event to wait on from outside, so its state is read every 50 ms.
    """
    async with httpx.AsyncClient(base_url=base) as admin, asyncio.timeout(30):
        while True:
            models = (await admin.get("/admin/state")).json()["models"]
            if models.get("tiny-llama", {}).get("depth", 0) >= depth:
                return
            await asyncio.sleep(0.05)


def _gauge(sim: Proc, name: str) -> float:
    for line in httpx.get(f"{sim.url}/metrics").text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(name)
