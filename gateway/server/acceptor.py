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

A connection that has sent nothing when it is accepted is not set up at all until it does: with
`connections` given, it is held as a socket with a reader (`Unread`), counted under the
connection cap (which may close it to make room, as any idle connection) and closed with 408 if
nothing comes within `header_timeout`; its first bytes set it up. Setting up a connection (a task,
a transport, uvicorn's protocol and parser, their timers) costs the event loop tens of
microseconds, so a client opening a thousand connections that send nothing cost tens of
milliseconds of loop time for nothing, and every connection accepted behind them (a health probe
among them: the listen backlog is first in, first out) waited for it. Held unread, one costs an
accept, a peek at its buffer and a reader. A connection whose request is already there (nearly
every client sends it with the handshake) is set up at once, without waiting a turn.

An accept that fails for lack of descriptors (EMFILE, ENFILE, or buffers: ENOBUFS, ENOMEM) would
fail again at once while the socket stays readable, so the acceptor pauses for `PAUSE` seconds and
logs once per pause. Any other failed accept concerns that one connection (reset before it was
accepted, refused by a firewall rule) and is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import struct
from collections.abc import Callable

from gateway.proxy.errors import GatewayError
from gateway.server.connection_cap import Connections
from gateway.server.refusals import raw_response

log = logging.getLogger("gateway.server.acceptor")

BATCH = 32
"""Connections accepted per turn of the loop: enough to take thousands per second, few enough that
setting them up and reading their requests takes a few milliseconds."""
PAUSE = 0.1
"""Seconds to stop accepting after running out of descriptors or buffers."""
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Unread:
    """An accepted connection that has sent nothing yet: its socket, a reader, a deadline."""

    __slots__ = ("_acceptor", "since", "sock", "timer")

    def __init__(self, acceptor: Acceptor, sock: socket.socket, since: float) -> None:
        self._acceptor = acceptor
        self.sock = sock
        self.since = since
        """When it was accepted: its request head is due `header_timeout` from then."""
        self.timer: asyncio.TimerHandle | None = None

    def evict(self) -> None:
        """Closed to make room for a new connection (gateway.server.connection_cap)."""
        self._acceptor.drop(self, reset=True)


class Acceptor:
    """Accepts connections on a listening socket, `batch` per turn of the loop, for `protocol`;
    with `connections`, those that have sent nothing are held unread until they do."""

    def __init__(
        self,
        sock: socket.socket,
        protocol: Callable[[], asyncio.Protocol],
        *,
        batch: int = BATCH,
        connections: Connections | None = None,
        header_timeout: float = 30.0,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._sock = sock
        self._protocol = protocol
        self._batch = batch
        self._connections = connections
        self._header_timeout = header_timeout
        self._tasks: set[asyncio.Task[object]] = set()
        self._unread: dict[int, Unread] = {}
        self._closed = False
        sock.setblocking(False)
        self._loop.add_reader(sock.fileno(), self.accept_ready)

    def close(self) -> None:
        """Stop accepting and close the connections held unread (nothing was asked of them); those
        set up are left to run. The listening socket is the caller's."""
        if not self._closed:
            self._closed = True
            self._loop.remove_reader(self._sock.fileno())
        for unread in list(self._unread.values()):
            self.drop(unread, reset=False)

    @property
    def unread(self) -> int:
        """Connections held unread now."""
        return len(self._unread)

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
        if self._connections is None or _has_bytes(conn):
            self._set_up(conn, None)
            return
        unread = Unread(self, conn, self._loop.time())
        if not self._connections.admit(unread):
            self._set_up(conn, None)  # its protocol answers 503 (gateway.server.listener)
            return
        fd = conn.fileno()
        self._unread[fd] = unread
        self._loop.add_reader(fd, self._readable, unread)
        unread.timer = self._loop.call_at(unread.since + self._header_timeout, self._timed_out, unread)

    def _readable(self, unread: Unread) -> None:
        """Its first bytes: set it up, its head due from when it was accepted. Its end, before
        any byte (a port check): close it."""
        assert self._connections is not None
        try:
            ended = unread.sock.recv(1, socket.MSG_PEEK) == b""
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            ended = True
        if ended:
            self._connections.closed(unread)
            self.drop(unread, reset=False)
            return
        self._forget(unread)
        self._connections.forget(unread)  # its protocol takes the place at once (connection_made)
        self._set_up(unread.sock, unread.since)

    def _timed_out(self, unread: Unread) -> None:
        unread.timer = None
        seconds = self._header_timeout
        err = GatewayError(408, f"no complete request head within {seconds:g} s", "request_timeout")
        with contextlib.suppress(OSError):
            unread.sock.send(raw_response(err))
        if self._connections is not None:
            self._connections.closed(unread)
        self.drop(unread, reset=False)

    def drop(self, unread: Unread, *, reset: bool) -> None:
        """Close a connection held unread; `reset` aborts it (RST) as an eviction does."""
        self._forget(unread)
        if reset:
            with contextlib.suppress(OSError):
                unread.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        unread.sock.close()

    def _forget(self, unread: Unread) -> None:
        if unread.timer is not None:
            unread.timer.cancel()
            unread.timer = None
        fd = unread.sock.fileno()
        if self._unread.pop(fd, None) is not None:
            self._loop.remove_reader(fd)

    def _set_up(self, conn: socket.socket, since: float | None) -> None:
        protocol = self._protocol
        if since is not None:

            def protocol() -> asyncio.Protocol:
                made = self._protocol()
                if hasattr(made, "head_since"):
                    made.head_since = since
                return made

        task = self._loop.create_task(self._loop.connect_accepted_socket(protocol, conn))
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


def _has_bytes(conn: socket.socket) -> bool:
    """Whether the connection's first bytes (or its end, or an error) are already there."""
    try:
        conn.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True  # reset before it was set up: the transport reports it
    return True
