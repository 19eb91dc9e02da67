"""SIGTERM with streams running and requests queued: the queue is answered 503 `shutting_down` at
once (OpenAI's shape, Retry-After), running streams finish within the grace or end with an in-band
error, and the process exits 0 with nothing alarming in its log."""

from __future__ import annotations

import asyncio
import os
import signal

import httpx
import openai

from tests.procs import spawn_gateway, spawn_sim

MODEL = "tiny-llama"


async def stream(client: openai.AsyncOpenAI, max_tokens: int) -> tuple[str, float]:
    """('done' | the error, when it ended) of one streaming completion."""
    try:
        chunks = await client.completions.create(
            model=MODEL, prompt="go", max_tokens=max_tokens, stream=True, extra_body={"ignore_eos": True}
        )
        async for _ in chunks:
            pass
        outcome = "done"
    except openai.APIStatusError as exc:
        outcome = f"{exc.status_code} {exc.code} retry-after={exc.response.headers.get('retry-after')}"
    except openai.APIError as exc:
        outcome = f"in-band: {exc.message}"
    return outcome, asyncio.get_running_loop().time()


async def until(check: object, client: httpx.AsyncClient) -> None:
    for _ in range(400):
        state = (await client.get("/admin/state")).json()
        inflight = sum(b["inflight"] for b in state["backends"])
        depth = sum(m["depth"] for m in state["models"].values())
        if (inflight, depth) == check:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached (inflight, queued) == {check}")


async def test_sigterm_answers_the_queue_at_once_and_ends_streams_within_the_grace() -> None:
    config = {
        "controller": {"algorithm": "fixed", "params": {"limit": 4}},
        "queue": {"timeout": 60},
        "shutdown_grace": 5,
    }
    # 30 tokens/s per stream: 75 tokens end within the grace, 1,000 do not.
    with (
        spawn_sim("--profile", "tiny-cpu", "--speed", "0.1") as sim,
        spawn_gateway({**config, "backends": [sim.url]}) as gw,
    ):
        client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0, timeout=60)
        async with httpx.AsyncClient(base_url=gw.url) as admin:
            long = [asyncio.create_task(stream(client, 1000)) for _ in range(3)]
            short = asyncio.create_task(stream(client, 75))
            await until((4, 0), admin)
            queued = [asyncio.create_task(stream(client, 5)) for _ in range(10)]
            await until((4, 10), admin)
        os.kill(gw.pid, signal.SIGTERM)
        shed = await asyncio.gather(*queued)
        finished = await short
        cut = await asyncio.gather(*long)
        assert gw.popen.wait(15) == 0
        log = gw.stderr()

    assert {outcome for outcome, _ in shed} == {"503 shutting_down retry-after=1"}
    assert finished[0] == "done" and max(at for _, at in shed) < finished[1]
    assert {outcome for outcome, _ in cut} == {"in-band: the gateway is shutting down"}
    assert "Traceback" not in log and "ERROR" not in log, log
