"""The connection cap: one server's open connections, which of them are idle, and which one makes room.

Past `max_connections` the connection idle the longest (no request in progress: kept alive between
requests, or still sending its first head) is closed to make room, so a flood of idle connections
cannot lock clients out. A connection still on its first head is closed only once it has been idle
for `MIN_IDLE` seconds: one accepted a moment ago has its request on the way or already in the
kernel's buffer, unread only because the loop has not come round to it, and closing it would lose a
request its client has sent. A kept-alive connection has no request in flight and may go at once.
With no connection to close, the newcomer gets 503 (gateway.server.listener), told to come back when a
place should be free for it (`ConnectionAdvice`: from the rate connections close, spread and
jittered, so the refused do not all return in the same instant).
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from gateway.server.connection_advice import ConnectionAdvice

MIN_IDLE = 1.0
"""Seconds a connection must have been idle before it may be closed to make room: a client's head
follows its connection within a round trip, so one idle for a second is holding a place."""


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
        # Idle connections and since when, the first idle the longest (linked lists: O(1) at both
        # ends): `_kept` between requests, `_new` not yet through their first request head.
        self._kept: OrderedDict[Evictable, float] = OrderedDict()
        self._new: OrderedDict[Evictable, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, conn: Evictable) -> bool:
        """Count a new connection, closing the longest idle one if at the cap; False: refuse it."""
        now = self._clock()
        if len(self._open) >= self.max_connections:
            victim = self._victim(now)
            if victim is None:
                return False
            self.closed(victim)
            victim.evict()
        self._open.add(conn)
        self._new[conn] = now
        return True

    def _victim(self, now: float) -> Evictable | None:
        """The connection idle the longest among those kept alive between requests and those new
        for at least MIN_IDLE; None if there is none."""
        kept = next(iter(self._kept.items()), None)
        new = next(iter(self._new.items()), None)
        if new is not None and now - new[1] < MIN_IDLE:
            new = None
        if kept is None or (new is not None and new[1] < kept[1]):
            return None if new is None else new[0]
        return kept[0]

    def busy(self, conn: Evictable) -> None:
        self._kept.pop(conn, None)
        self._new.pop(conn, None)

    def idle(self, conn: Evictable) -> None:
        if conn in self._open:
            self._kept[conn] = self._clock()
            self._kept.move_to_end(conn)

    def closed(self, conn: Evictable) -> None:
        if conn in self._open:
            self._open.remove(conn)
            self.busy(conn)
            self.advice.closed(self._clock())

    def forget(self, conn: Evictable) -> None:
        """Stop counting `conn` without counting a close: it lives on as another object (a
        connection held unread, now set up), which is admitted in its place at once."""
        self._open.discard(conn)
        self.busy(conn)

    def retry_after(self) -> float:
        """Seconds a client refused now should wait before it tries again."""
        return self.advice.retry_after(self._clock())
