"""A batch beside interactive traffic: the real `openai` SDK -> gateway -> simulated vLLM (the
`gemma3-4b-rtx4080` profile: Gemma 3 4B on one RTX 4080, 11,824 KV tokens), over loopback.
Interactive users stream through the gateway while a batch runs; the batch may take only the KV
cache their requests leave, so vLLM never has to evict a running request (a preemption), which an
interactive request would pay for by recomputing its prompt."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from gateway.pool.vllm_metrics import parse_vllm_metrics
from tests.batch.jsonl import CHAT, chat_line, jsonl
from tests.procs import Proc, spawn_gateway, spawn_sim

MODEL = "google/gemma-3-4b-it"
PROMPT = ("the model reads every candidate answer and scores it " * 60)[:3120]
"""A 5,000-evaluation job's prompts: about 788 tokens at the simulator's 4 bytes per token. With
OUTPUT a request holds about 1,100 KV tokens at its end, so the profile's 11,824 hold 10 of them,
though 12 fit while they are half done (what vLLM reports as usage in steady state)."""
OUTPUT = 308
USERS = 6
LINES = 32


@pytest.fixture
def sim() -> Iterator[Proc]:
    with spawn_sim("--profile", "gemma3-4b-rtx4080", "--speed", "8", "--seed", "4") as s:
        yield s


@pytest.fixture
def gateway(sim: Proc, tmp_path: Path) -> Iterator[Proc]:
    config = {
        "backends": [{"url": sim.url, "name": "gemma"}],
        # A limit well above what the KV cache holds, as the `sla` controller reaches when latency
        # stays within the SLA (89 in the batch benchmark): only the KV bounds stop the batch.
        "controller": {"algorithm": "fixed", "params": {"limit": 32}},
        "batch": {"data_dir": str(tmp_path)},
    }
    with spawn_gateway(config) as gw:
        yield gw


def preemptions(sim: Proc) -> float:
    scrape = parse_vllm_metrics(httpx.get(f"{sim.url}/metrics").text)
    assert scrape.preemptions_total is not None
    return scrape.preemptions_total


def batch_input() -> bytes:
    lines = []
    for i in range(LINES):
        line = chat_line(f"line-{i}", MODEL, max_tokens=OUTPUT, ignore_eos=True)
        line["body"]["messages"] = [{"role": "user", "content": f"line {i} {PROMPT}"}]
        lines.append(line)
    return jsonl(*lines)


async def interactive_user(
    c: openai.AsyncOpenAI, user: int, stop: asyncio.Event, answered: list[int], all_answered: asyncio.Event
) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        stream = await c.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": f"user {user} request {n} {PROMPT}"}],
            max_tokens=OUTPUT,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        async for _ in stream:
            pass
        answered.append(1)
        if len(answered) >= USERS:
            all_answered.set()


async def test_batch_lines_never_make_vllm_evict_a_running_request(sim: Proc, gateway: Proc) -> None:
    c = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    stop = asyncio.Event()
    answered: list[int] = []
    all_answered = asyncio.Event()
    users = [asyncio.create_task(interactive_user(c, u, stop, answered, all_answered)) for u in range(USERS)]
    try:
        await all_answered.wait()  # the gateway has seen whole requests: it knows their size
        before = await asyncio.to_thread(preemptions, sim)
        file = await c.files.create(file=("lines.jsonl", batch_input()), purpose="batch")
        batch = await c.batches.create(input_file_id=file.id, endpoint=CHAT, completion_window="24h")
        deadline = time.monotonic() + 100
        while batch.status not in ("completed", "failed", "cancelled", "expired"):
            assert time.monotonic() < deadline, f"batch still {batch.status}"
            await asyncio.sleep(0.1)
            batch = await c.batches.retrieve(batch.id)
        after = await asyncio.to_thread(preemptions, sim)
    finally:
        stop.set()
        await asyncio.gather(*users, return_exceptions=True)
    assert batch.status == "completed" and batch.request_counts is not None
    assert batch.request_counts.completed == LINES
    assert after == before
