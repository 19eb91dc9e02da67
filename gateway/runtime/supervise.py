"""Background loops that do not die silently: a loop that raises is logged and started again.

The health checks and the control loop of each backend run for the life of the gateway. An
exception escaping one of them used to end its task without a word: the backend was no longer
checked (or its limit no longer adjusted) while everything else looked fine. `supervise` runs such
a loop; when it raises, the traceback is logged and the loop is started again after `delay` seconds,
doubling while it keeps failing soon after each start, up to `max_delay`. A loop that ran for
`max_delay` seconds before failing starts again after `delay`. Cancellation ends it, as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gateway.types import Clock

log = logging.getLogger("gateway.runtime.supervise")


async def supervise(
    name: str,
    loop: Callable[[], Awaitable[None]],
    *,
    clock: Clock,
    delay: float = 1.0,
    max_delay: float = 30.0,
) -> None:
    """Run `loop()` until cancelled, starting it again whenever it raises or returns."""
    if not 0 < delay <= max_delay:
        raise ValueError(f"need 0 < delay <= max_delay, got {delay!r}, {max_delay!r}")
    wait = delay
    while True:
        started = clock()
        error: Exception | None = None
        try:
            await loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = exc
        if clock() - started >= max_delay:
            wait = delay  # it had been running well: not a crash loop
        what = "failed" if error is not None else "returned"
        log.error("%s %s; starting it again in %.2f s", name, what, wait, exc_info=error)
        await asyncio.sleep(wait)
        wait = min(max_delay, wait * 2)
