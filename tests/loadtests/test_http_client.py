"""The benchmarks' measuring client against a real simulated server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import orjson
import pytest

from loadtests.http_client import Connection
from tests.procs import Proc, spawn_sim


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    with spawn_sim("--profile", "instant") as proc:
        yield proc


def test_a_stream_is_stamped_once_per_token_and_the_connection_is_kept(sim: Proc) -> None:
    async def run() -> None:
        conn = Connection.to(sim.url)
        body = orjson.dumps({"prompt": "go", "max_tokens": 12, "ignore_eos": True, "stream": True})
        try:
            first = await conn.post("/v1/completions", body, stamps=True)
            again = await conn.post("/v1/completions", body)  # the same connection, read to its end
        finally:
            conn.close()
        assert first.status == 200 and len(first.stamps) == 12
        assert first.sent <= first.stamps[0] == first.first <= first.stamps[-1] <= first.ended
        assert again.status == 200 and again.first is not None and again.stamps == []

    asyncio.run(run())


def test_a_whole_answer_keeps_its_body(sim: Proc) -> None:
    async def run() -> None:
        conn = Connection.to(sim.url)
        body = orjson.dumps(
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "ignore_eos": True}
        )
        try:
            answer = await conn.post("/v1/chat/completions", body)
            missing = await conn.post("/v1/nothing", b"{}")
        finally:
            conn.close()
        assert answer.status == 200 and orjson.loads(answer.body)["usage"]["completion_tokens"] == 5
        assert missing.status == 404

    asyncio.run(run())
