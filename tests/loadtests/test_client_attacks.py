"""The client attacks run until stopped and report what the gateway answered."""

from __future__ import annotations

import asyncio
from collections import Counter

from loadtests.client_attacks import oversized_names, unknown_models
from tests.procs import free_port, spawn_gateway


async def test_the_attacks_run_until_stopped_and_count_answers() -> None:
    nothing_there = f"http://127.0.0.1:{free_port()}"
    with spawn_gateway({"backends": [nothing_there], "health": {"interval": 30}}) as gw:
        seen: Counter[str] = Counter()

        def count(what: str) -> None:
            seen[what] += 1

        stop = asyncio.Event()
        attacks = [
            asyncio.create_task(unknown_models(gw.url, stop, count, concurrency=2)),
            asyncio.create_task(oversized_names(gw.url, stop, count)),
        ]
        await asyncio.sleep(0.5)  # let them run a while
        stop.set()
        await asyncio.wait_for(asyncio.gather(*attacks), 30)
    oversized = [k for k in seen if k.startswith("oversized")]
    assert set(seen) - set(oversized) == {"unknown model: 503"}, seen
    assert oversized and all(k.startswith("oversized: 400, ") for k in oversized), seen
    assert all(int(k.split()[2]) < 1000 for k in oversized), seen  # nothing echoed back
