"""The gateway reads the real engine's own metrics: KV usage, running and waiting requests,
preemptions, and the KV capacity from vllm:cache_config_info."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest
from real_engine import Gateway, engine_metrics

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

POLL_DEADLINE_S = 60.0


async def backend_state(client: httpx.AsyncClient, gateway: Gateway) -> dict[str, object]:
    state = (await client.get(gateway.base_url + "/admin/state")).json()
    [backend] = [b for b in state["backends"] if b["url"].rstrip("/") == gateway.engine.base_url]
    return dict(backend)


async def poll_until(
    read: Callable[[], Awaitable[dict[str, object]]], done: Callable[[dict[str, object]], bool]
) -> dict[str, object]:
    """Read until done(value) holds; fail with the last value after the deadline."""
    deadline = time.monotonic() + POLL_DEADLINE_S
    value = await read()
    while not done(value):
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {POLL_DEADLINE_S:.0f} s; last state: {value}")
        await asyncio.sleep(0.25)
        value = await read()
    return value


async def generate(client: httpx.AsyncClient, base_url: str, model: str, seed: int) -> int:
    body = {
        "model": model,
        "prompt": f"{seed:04d}" + "5" * 228,
        "max_tokens": 300,
        "ignore_eos": True,
    }
    response = await client.post(base_url + "/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return int(response.json()["usage"]["completion_tokens"])


def engine_running(base_url: str) -> dict[str, object]:
    return {"running": sum(v for _, v in engine_metrics(base_url)["vllm:num_requests_running"])}


async def test_gateway_tracks_engine_load_up_and_down(gateway: Gateway) -> None:
    engine = gateway.engine
    async with httpx.AsyncClient(timeout=300) as client:
        idle = await backend_state(client, gateway)
        assert idle["healthy"] is True
        assert engine.model in idle["models"]  # type: ignore[operator]

        # Eight clients that keep sending until both views have shown the load: eight requests
        # sent once can finish between two of the gateway's scrapes on a fast engine (or one that
        # a busy host stalls), and then it rightly reports nothing running.
        stop = asyncio.Event()

        async def client_loop(i: int) -> int:
            sent = 0
            while not stop.is_set():
                assert await generate(client, gateway.base_url, engine.model, 100 * i + sent) == 300
                sent += 1
            return sent

        load = [asyncio.create_task(client_loop(i)) for i in range(8)]
        try:
            own = asyncio.create_task(
                poll_until(
                    lambda: asyncio.to_thread(engine_running, engine.base_url),
                    lambda own: float(own["running"]) > 0,  # type: ignore[arg-type]
                )
            )
            busy = await poll_until(
                lambda: backend_state(client, gateway),
                lambda s: float(s["kv_usage"] or 0) > 0 and float(s["running"] or 0) > 0,  # type: ignore[arg-type]
            )
            assert 0 < float(busy["kv_usage"]) <= 1  # type: ignore[arg-type]
            await own
        finally:
            stop.set()
        assert all(sent >= 1 for sent in await asyncio.gather(*load))
        quiet = await poll_until(
            lambda: backend_state(client, gateway),
            lambda s: s["kv_usage"] == 0 and s["running"] == 0 and s["inflight"] == 0,
        )
        assert quiet["waiting"] == 0


async def test_kv_ceiling_comes_from_cache_config_info(gateway: Gateway) -> None:
    engine = gateway.engine
    async with httpx.AsyncClient(timeout=300) as client:
        await asyncio.gather(*(generate(client, gateway.base_url, engine.model, i) for i in range(4)))
        state = await poll_until(
            lambda: backend_state(client, gateway), lambda s: s["kv_ceiling"] is not None
        )
    footprint = float(state["kv_tokens_per_running"] or state["tokens_per_request"])  # type: ignore[arg-type]
    ceiling = int(state["kv_ceiling"])  # type: ignore[call-overload]
    # The engine's capacity (num_gpu_blocks x block_size) divided by the per-request footprint.
    assert ceiling * footprint <= engine.kv_tokens < (ceiling + 1) * footprint
    # The default controller is not bounded by it: it goes past it where throughput still rises.
    assert int(state["ceiling"]) > ceiling  # type: ignore[call-overload]


async def test_gateway_sees_the_engine_queue_and_preemptions(gateway: Gateway) -> None:
    """Load sent straight to the engine (as another client of it would) overflows its KV cache:
    the gateway's view of the backend shows the queue and the preemptions."""
    engine = gateway.engine
    async with httpx.AsyncClient(timeout=300) as client:
        before = await backend_state(client, gateway)
        for field in ("preemptions_total", "kv_capacity_tokens"):
            assert field in before, f"/admin/state has no {field!r} for the backend: {before}"
        preempted_before = float(before["preemptions_total"] or 0)  # type: ignore[arg-type]
        load = [
            asyncio.create_task(generate(client, engine.base_url, engine.model, 100 + i)) for i in range(40)
        ]
        # Overflowed: requests wait in the engine's queue while its KV cache is mostly in use (the
        # queue also holds requests waiting for their prefill, before the cache fills).
        await poll_until(
            lambda: backend_state(client, gateway),
            lambda s: float(s["waiting"] or 0) >= 1 and float(s["kv_usage"] or 0) > 0.5,  # type: ignore[arg-type]
        )
        await asyncio.gather(*load)
        after = await poll_until(
            lambda: backend_state(client, gateway),
            lambda s: float(s["preemptions_total"] or 0) > preempted_before,  # type: ignore[arg-type]
        )
    own = engine_metrics(engine.base_url)
    engine_total = sum(v for _, v in own["vllm:num_preemptions_total"])
    assert float(after["preemptions_total"]) == engine_total  # type: ignore[arg-type]
    assert int(after["kv_capacity_tokens"]) == engine.kv_tokens  # type: ignore[call-overload]
