"""stop_tasks: every task ends, even one that dropped a cancellation, and none hides a failure."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys

import pytest

from gateway.runtime.tasks import stop_tasks


class WaitForLoop:
    """A background loop that waits through `asyncio.wait_for`, as redis-py sends each command."""

    def __init__(self) -> None:
        self.futures: list[asyncio.Future[None]] = []
        self.turned = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.futures.append(asyncio.get_running_loop().create_future())
            self.turned.set()
            await asyncio.wait_for(self.futures[-1], 10)

    async def next_turn(self) -> None:
        """Return once the loop has begun another wait (and is inside it)."""
        await self.turned.wait()
        self.turned.clear()
        await asyncio.sleep(0)  # from wait_for's start to its await


async def test_a_loop_that_dropped_a_cancellation_is_stopped() -> None:
    loop = WaitForLoop()
    await loop.next_turn()
    task = loop.task
    loop.futures[-1].set_result(None)  # the answer arrives in the same turn as stop_tasks cancels
    stopping = asyncio.create_task(stop_tasks([task], again=0.01))
    await asyncio.wait([stopping], timeout=5)  # unlike a timeout, cancels neither while it waits
    task.cancel()  # lets a failing run end
    assert stopping.done()
    assert task.cancelled()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="asyncio.wait_for keeps the cancellation from 3.12")
async def test_python_3_11_wait_for_drops_a_cancellation_that_arrives_with_the_result() -> None:
    """The fault stop_tasks exists for: one cancel() is not enough."""
    loop = WaitForLoop()
    await loop.next_turn()
    task = loop.task
    loop.futures[-1].set_result(None)
    task.cancel()
    await loop.next_turn()  # the loop went round again instead of ending
    assert not task.done()
    assert task.cancelling() == 1  # the request is still counted: a second cancel() lands
    await stop_tasks([task])
    assert task.cancelled()


async def test_tasks_already_ended_are_left_as_they_are() -> None:
    async def returns() -> None:
        return None

    done = asyncio.create_task(returns())
    await done
    await stop_tasks([done])
    assert not done.cancelled()


async def test_a_task_that_had_failed_is_logged_and_the_others_still_stopped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails() -> None:
        raise RuntimeError("broken loop")

    async def runs() -> None:
        await asyncio.Event().wait()

    failed = asyncio.create_task(fails())
    forever = asyncio.create_task(runs())
    await asyncio.sleep(0)
    with caplog.at_level(logging.ERROR, logger="gateway.runtime.tasks"):
        await stop_tasks([failed, forever])
    assert forever.cancelled()
    assert "broken loop" in caplog.text


async def test_the_caller_can_still_be_cancelled_while_it_waits() -> None:
    released = asyncio.Event()

    async def ignores_cancellation() -> None:
        while not released.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(10)

    stubborn = asyncio.create_task(ignores_cancellation())
    stopping = asyncio.create_task(stop_tasks([stubborn], again=0.01))
    await asyncio.sleep(0.05)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert not stubborn.done()
    released.set()
    await stop_tasks([stubborn])
    assert stubborn.done()
