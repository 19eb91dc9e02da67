"""Stopping background tasks for certain: cancel, wait, and cancel again any that ran on.

`stop_tasks` cancels every task and waits until each has ended, cancelling again every `again`
seconds those still running. One cancellation is not always enough: on Python 3.11,
`asyncio.wait_for` returns the inner result instead of raising when the cancellation arrives in
the same turn of the event loop as that result (CPython gh-86296, fixed in 3.12), and redis-py's
asyncio connection sends every command through `wait_for`. A loop that talks to Redis then drops
roughly one cancellation in a hundred and keeps looping, and a shutdown that awaits it once waits
forever (a worker held past its grace until the supervisor kills it). The task still counts the
request (`Task.cancelling()`), so a second `cancel()` lands at its next await.

A task that ended in an exception other than cancellation is logged, not raised: the shutdown
that called goes on to close everything else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)

AGAIN = 0.1
"""Seconds between cancellations of a task that is still running."""


async def stop_tasks(tasks: Iterable[asyncio.Task[None]], *, again: float = AGAIN) -> None:
    """Cancel `tasks` and return once every one has ended."""
    tasks = list(tasks)
    running = {task for task in tasks if not task.done()}
    while running:
        for task in running:
            task.cancel()
        _, running = await asyncio.wait(running, timeout=again)
    for task in tasks:
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("task %s had failed", task.get_name(), exc_info=error)
