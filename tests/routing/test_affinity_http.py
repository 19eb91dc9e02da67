"""Over real HTTP: the OpenAI SDK -> gateway (prefix routing) -> three simulated vLLM servers.

The first turns of three conversations are sent together, so load spreads them over the three
backends; the second turns are then sent one at a time to an idle pool, where load alone would
send every one of them to the same backend. Each must land where its conversation's first turn did.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.procs import Proc, spawn_gateway, spawn_sim

PROFILE = "llama3-8b-h100"
MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"
SYSTEMS = [f"You are assistant number {i}. Answer in the voice of a ship's log. " * 30 for i in range(3)]


@pytest.fixture(scope="module")
def gateway() -> Iterator[Proc]:
    with (
        spawn_sim("--profile", PROFILE, "--seed", "1") as a,
        spawn_sim("--profile", PROFILE, "--seed", "2") as b,
        spawn_sim("--profile", PROFILE, "--seed", "3") as c,
    ):
        config = {
            "backends": [{"url": s.url, "name": f"sim-{i}"} for i, s in enumerate((a, b, c))],
            "health": {"interval": 0.2},
            "controller": {"algorithm": "fixed", "params": {"limit": 8}},
        }
        with spawn_gateway(config) as gw:
            yield gw


async def ask(client: openai.AsyncOpenAI, messages: list[dict[str, str]], **extra: object) -> tuple[str, str]:
    """(backend that served it, reply text)."""
    raw = await client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, max_tokens=48, extra_body={"ignore_eos": True}, **extra
    )
    reply = raw.parse().choices[0].message.content or ""
    return raw.headers["x-gateway-backend"], reply


async def test_two_turns_of_a_conversation_land_on_the_same_backend(gateway: Proc) -> None:
    async with openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="k", max_retries=0) as client:
        firsts = [
            [{"role": "system", "content": s}, {"role": "user", "content": "Log the weather."}]
            for s in SYSTEMS
        ]
        placed = await asyncio.gather(*(ask(client, m) for m in firsts))
        homes = [backend for backend, _ in placed]
        assert len(set(homes)) == 3, homes  # spread by load while they ran together
        for messages, (home, reply) in zip(firsts, placed, strict=True):
            turn2 = [
                *messages,
                {"role": "assistant", "content": reply},
                {"role": "user", "content": "And now?"},
            ]
            backend, _ = await ask(client, turn2)
            assert backend == home

    async with httpx.AsyncClient(base_url=gateway.url) as http:
        state = (await http.get("/admin/state")).json()
        metrics = (await http.get("/metrics")).text
    assert state["routing"] == "prefix"
    caches = {b["name"]: b["prefix_cache"] for b in state["backends"]}
    assert all(c["index_chunks"] > 0 and c["index_hit_rate"] > 0.3 for c in caches.values()), caches
    assert 'gateway_prefix_index_chunks{backend="sim-0"}' in metrics
    assert 'gateway_prefix_index_hits_total{backend="sim-0"}' in metrics


async def test_a_session_keeps_short_prompts_on_one_backend(gateway: Proc) -> None:
    async with openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="k", max_retries=0) as client:
        sessions = [f"session-{i}" for i in range(3)]
        hello = [{"role": "user", "content": "hi"}]
        placed = await asyncio.gather(
            *(ask(client, hello, user=sessions[0]), ask(client, hello, user=sessions[1])),
            ask(client, hello, extra_headers={"x-session-id": sessions[2]}),
        )
        homes = [backend for backend, _ in placed]
        assert len(set(homes)) == 3, homes
        for i, home in enumerate(homes):
            extra: dict[str, object] = (
                {"extra_headers": {"x-session-id": sessions[i]}} if i == 2 else {"user": sessions[i]}
            )
            backend, _ = await ask(client, [{"role": "user", "content": "again"}], **extra)
            assert backend == home


def test_backends_report_their_prefix_cache_hits(gateway: Proc) -> None:
    """The simulators' vLLM counters, scraped by the gateway, show the second turns' hits."""
    deadline = time.monotonic() + 10
    while True:
        backends = httpx.get(f"{gateway.url}/admin/state").json()["backends"]
        rates = [b["prefix_cache"]["backend_hit_rate"] for b in backends]
        if all(r is not None and r > 0.3 for r in rates) or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # the gateway scrapes every 0.2 s; nothing else signals a scrape
    assert all(r is not None and r > 0.3 for r in rates), rates
