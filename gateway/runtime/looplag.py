"""Event-loop lag: how late the loop runs a timer, observed every `interval` seconds.

Everything the gateway does runs on one event loop, so while one callback holds it (a large parse,
a long render) every request, timer and health check waits. A sleep of `interval` that returns
`interval + lag` seconds later measures that wait: the lag is what any request arriving at the same
moment would have waited before the gateway looked at it. Sampling costs one timer per interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def watch_loop_lag(observe: Callable[[float], None], interval: float = 0.05) -> None:
    """Run until cancelled, passing each measured lag (seconds, >= 0) to `observe`."""
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(interval)
        observe(max(0.0, loop.time() - before - interval))
