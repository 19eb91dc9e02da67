"""The scenario load generator's retries against a real HTTP server on loopback that sheds."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from loadtests.scenarios.definitions import STANDARD
from loadtests.scenarios.loadgen import LoadGen, RetryPolicy, Workload

StartShedder = Callable[[float], Awaitable[tuple[str, list[float]]]]


@pytest.fixture
async def shedder() -> AsyncIterator[StartShedder]:
    """`start(retry_after)` runs a server that answers every chat request 429 with that advice;
    it returns the server's URL and the times of the requests it got."""
    runners: list[web.AppRunner] = []

    async def start(retry_after: float) -> tuple[str, list[float]]:
        hits: list[float] = []

        async def chat(request: web.Request) -> web.Response:
            hits.append(time.monotonic())
            body = {"error": {"message": "queue full", "type": "rate_limit", "code": "queue_full"}}
            return web.Response(
                status=429,
                text=json.dumps(body),
                content_type="application/json",
                headers={"retry-after-ms": str(int(retry_after * 1000))},
            )

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}", hits

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_a_retry_advised_past_the_budget_is_not_made_and_the_request_stays_shed(
    shedder: StartShedder,
) -> None:
    url, hits = await shedder(60.0)
    async with LoadGen([url], "m", request_timeout=2.0) as gen:
        gen.launch(Workload(STANDARD.prompt, STANDARD.output))
        await gen.drain(10.0)
    (record,) = gen.records
    assert (record.outcome, record.shed_reason, record.attempts) == ("shed", "queue_full", 1)
    assert record.retry_after == 60.0 and len(hits) == 1


async def test_retries_within_the_budget_follow_the_advice(shedder: StartShedder) -> None:
    url, hits = await shedder(0.05)
    async with LoadGen([url], "m", request_timeout=5.0, retry=RetryPolicy(max_retries=2)) as gen:
        gen.launch(Workload(STANDARD.prompt, STANDARD.output))
        await gen.drain(10.0)
    (record,) = gen.records
    assert (record.outcome, record.attempts) == ("shed", 3)
    assert len(hits) == 3 and hits[2] - hits[0] >= 0.1
