"""supervise: a background loop that raises is logged and started again; cancelling it ends it."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

import pytest

from gateway.runtime.supervise import supervise


async def test_a_loop_that_dies_is_logged_and_started_again(caplog: pytest.LogCaptureFixture) -> None:
    starts: list[float] = []
    running = asyncio.Event()

    async def loop() -> None:
        starts.append(time.monotonic())
        if len(starts) <= 3:
            raise ValueError(f"bad interval #{len(starts)}")
        running.set()
        await asyncio.Event().wait()  # then it runs for good

    with caplog.at_level(logging.ERROR, logger="gateway.runtime.supervise"):
        task = asyncio.create_task(
            supervise("health checks of b", loop, clock=time.monotonic, delay=0.02, max_delay=10.0)
        )
        await asyncio.wait_for(running.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert len(starts) == 4
    failures = [r for r in caplog.records if "health checks of b failed" in r.getMessage()]
    assert [r.exc_info[1].args[0] for r in failures if r.exc_info and r.exc_info[1]] == [
        "bad interval #1",
        "bad interval #2",
        "bad interval #3",
    ]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert gaps[0] >= 0.02 and gaps[1] >= 0.04 and gaps[2] >= 0.08  # doubling while it keeps failing


async def test_a_loop_that_returns_is_started_again(caplog: pytest.LogCaptureFixture) -> None:
    runs = 0
    again = asyncio.Event()

    async def loop() -> None:
        nonlocal runs
        runs += 1
        if runs == 2:
            again.set()

    with caplog.at_level(logging.ERROR, logger="gateway.runtime.supervise"):
        task = asyncio.create_task(supervise("control loop of b", loop, clock=time.monotonic, delay=0.01))
        await asyncio.wait_for(again.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert "control loop of b returned; starting it again" in caplog.text


async def test_delays_must_make_sense() -> None:
    async def loop() -> None:
        pass

    with pytest.raises(ValueError):
        await supervise("x", loop, clock=time.monotonic, delay=0.0)
