"""The deadlines of the exchanges under way, kept by one sweep instead of a loop timer each.

An exchange's deadline is `first_byte` seconds from dispatch until its answer starts, then `idle`
seconds from each chunk; it moves with every chunk and almost never fires. Arming a loop timer per
exchange, and again per gap, costs more on the request path than the deadline is worth. Instead
each exchange runs under an `asyncio.timeout(None)` (which turns a firing into `TimeoutError` for
that exchange alone) whose due time is noted here, and one timer sweeps them all every
`resolution` seconds, firing those past due. A deadline so fires between 0 and `resolution` late:
with `resolution` 1/STEPS of the shortest timeout, at most 1% of any deadline, and never under the
loop's own timer granularity of a millisecond (libuv's).
"""

from __future__ import annotations

import asyncio

STEPS = 100
"""Sweeps per shortest timeout: how late (as a share of it) a deadline may fire."""
GRANULARITY = 0.001
"""The event loop's timers count whole milliseconds: no sweep comes sooner."""


class Deadlines:
    def __init__(self, shortest: float) -> None:
        self._due: dict[asyncio.Timeout, float] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self.fit(shortest)

    def fit(self, shortest: float) -> None:
        """Sweep often enough for timeouts as short as `shortest` seconds (also on a reload)."""
        self.resolution = max(shortest / STEPS, GRANULARITY)

    def __len__(self) -> int:
        return len(self._due)

    def set(self, timeout: asyncio.Timeout, due: float) -> None:
        """`timeout` fires once the loop's clock passes `due` (it is moved on every chunk: a dict
        write, no timer)."""
        self._due[timeout] = due
        if self._sweep is None:
            loop = asyncio.get_running_loop()
            self._sweep = loop.call_at(loop.time() + self.resolution, self._run)

    def discard(self, timeout: asyncio.Timeout) -> None:
        """The exchange under `timeout` ended."""
        self._due.pop(timeout, None)

    def fire_all(self) -> None:
        """Fire every deadline now (shutdown: the grace is over)."""
        now = asyncio.get_running_loop().time()
        for timeout in self._due:
            _fire(timeout, now)
        self._due.clear()

    def close(self) -> None:
        """No more sweeps (the upstream closed)."""
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    def _run(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        late = [timeout for timeout, due in self._due.items() if due <= now]
        for timeout in late:
            del self._due[timeout]
            _fire(timeout, now)
        self._sweep = loop.call_at(now + self.resolution, self._run) if self._due else None


def _fire(timeout: asyncio.Timeout, now: float) -> None:
    """Make `timeout` fire now, unless it already has (a chunk may move a deadline that fired
    before its exchange heard of it)."""
    if not timeout.expired():
        timeout.reschedule(now)
