"""Accepting client connections a few at a time, so that a burst of them cannot hold the event loop.

The event loop's own server (libuv's under uvloop) accepts every pending connection in one callback
and sets each one up before anything else runs. A burst of thousands of connections then holds the
loop for as long as all of them take, and meanwhile no running stream is fed, no timer fires and no
health probe is answered: what a burst costs lands on everyone.

Here the listening socket is watched for readability, and each time it is ready at most `batch`
connections are accepted and handed to the loop as accepted sockets. The rest wait in the kernel's
listen backlog (their handshake done, their request bytes buffered) until the loop comes round
again, after everything that became ready in between has run. Per turn of the loop at most `batch`
connections are set up and so at most `batch` new requests read, which bounds the loop's lag by the
work of `batch` connections whatever the size of the burst; the burst itself is still accepted at
`batch` per turn, thousands per second.

An accept that fails for lack of descriptors (EMFILE, ENFILE, or buffers: ENOBUFS, ENOMEM) would
fail again at once while the socket stays readable, so the acceptor pauses for `PAUSE` seconds and
logs once per pause. Any other failed accept concerns that one connection (reset before it was
accepted, refused by a firewall rule) and is skipped.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable

log = logging.getLogger("gateway.server.acceptor")

BATCH = 32
"""Connections accepted per turn of the loop: enough to take thousands per second, few enough that
setting them up and reading their requests takes a few milliseconds."""
PAUSE = 0.1
"""Seconds to stop accepting after running out of descriptors or buffers."""
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Acceptor:
    """Accepts connections on a listening socket, `batch` per turn of the loop, for `protocol`."""

    def __init__(
        self,
        sock: socket.socket,
        protocol: Callable[[], asyncio.Protocol],
        *,
        batch: int = BATCH,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._sock = sock
        self._protocol = protocol
        self._batch = batch
        self._tasks: set[asyncio.Task[object]] = set()
        self._closed = False
        sock.setblocking(False)
        self._loop.add_reader(sock.fileno(), self.accept_ready)

    def close(self) -> None:
        """Stop accepting; connections already accepted are left to run. The socket is the caller's."""
        if not self._closed:
            self._closed = True
            self._loop.remove_reader(self._sock.fileno())

    def accept_ready(self) -> None:
        """Accept up to `batch` pending connections; the loop calls this while the socket is readable."""
        for _ in range(self._batch):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._pause(exc)
                    return
                log.warning("accept failed: %s", exc)
                continue
            self._start(conn)

    def _start(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        if conn.family in (socket.AF_INET, socket.AF_INET6):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task = self._loop.create_task(self._loop.connect_accepted_socket(self._protocol, conn))
        self._tasks.add(task)
        task.add_done_callback(self._started)

    def _started(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.debug("a connection closed while being set up: %s", exc)

    def _pause(self, exc: OSError) -> None:
        log.warning("accepting paused for %.1f s: %s", PAUSE, exc.strerror)
        self._loop.remove_reader(self._sock.fileno())
        self._loop.call_later(PAUSE, self._resume)

    def _resume(self) -> None:
        if not self._closed:
            self._loop.add_reader(self._sock.fileno(), self.accept_ready)
