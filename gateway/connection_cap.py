"""The connection cap: one server's open connections, which of them are idle, and which one makes room.

Past `max_connections` the connection idle the longest (no request in progress: between requests,
or still sending its head) is closed to make room, so a flood of idle connections cannot lock
clients out. With no idle one, the newcomer gets 503 (gateway.listener), told to come back when a
place should be free for it (`ConnectionAdvice`: from the rate connections close, spread and
jittered, so the refused do not all return in the same instant).
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from gateway.connection_advice import ConnectionAdvice


class Evictable(Protocol):
    def evict(self) -> None:
        """Close this connection to make room for a new one (it has no request in progress)."""


class Connections:
    """The open connections of one server, and which of them are idle, oldest first."""

    def __init__(
        self,
        max_connections: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.max_connections = max_connections
        self._clock = clock
        self.advice = ConnectionAdvice(now=clock(), rng=rng or random.Random())
        self._open: set[Evictable] = set()
        self._idle: OrderedDict[Evictable, None] = OrderedDict()
        """The first key has been idle the longest (a linked list: O(1) at both ends)."""

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, conn: Evictable) -> bool:
        """Count a new connection, closing the longest idle one if at the cap; False: refuse it."""
        if len(self._open) >= self.max_connections:
            victim = next(iter(self._idle), None)
            if victim is None:
                return False
            self.closed(victim)
            victim.evict()
        self._open.add(conn)
        self._idle[conn] = None
        return True

    def busy(self, conn: Evictable) -> None:
        self._idle.pop(conn, None)

    def idle(self, conn: Evictable) -> None:
        if conn in self._open:
            self._idle[conn] = None
            self._idle.move_to_end(conn)

    def closed(self, conn: Evictable) -> None:
        if conn in self._open:
            self._open.remove(conn)
            self._idle.pop(conn, None)
            self.advice.closed(self._clock())

    def retry_after(self) -> float:
        """Seconds a client refused now should wait before it tries again."""
        return self.advice.retry_after(self._clock())
