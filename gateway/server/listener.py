"""Client connections with limits: uvicorn's httptools protocol, bounded in time, size and number.

uvicorn bounds none of what a client can hold before it has sent a request, and httptools has no
header size limit; these rules do (values in `ListenLimits`):
- Head timeout. From a connection's first moment (or a kept-alive connection's first new byte) the
  request line and headers must be complete within `header_timeout`, or the connection gets 408 and
  is closed. A client that sends nothing or half a request line no longer holds a descriptor.
- Body timeout. From the end of its head, a request's body must be complete within `body_timeout`
  plus a second per `body_min_rate` bytes received, or the request is answered 408 (cut, if its
  answer has begun) and the connection closed; the application's `receive` reports a disconnect, so
  nothing it holds for the request outlives it. Time while the application is not reading (uvicorn
  paused the socket) does not count: that wait is the gateway's, not the client's. Without it a
  client that sends a head and then stalls or trickles the body holds a connection for ever.
- Head size. Bytes are counted before they reach the parser; past `max_header_bytes`, or past
  `max_headers` headers, the answer is 431. httptools accumulates each header by concatenation, so an
  unbounded header costs memory and quadratic time on the event loop: it must never be fed.
- No protocol switch. A request asking to switch protocols (`Connection: upgrade` with `Upgrade`, as
  WebSocket and h2c do, or `CONNECT`) is answered 400 `unsupported_upgrade`, since the gateway serves
  only HTTP/1.1 requests; and uvicorn's hand-over to a WebSocket protocol is switched off, so the
  transport keeps this protocol for its whole life and its `connection_lost` (which gives back the
  connection cap's place) runs on every path.
- Connection cap. Past `max_connections` the connection idle the longest is closed to make room,
  and with no idle one the newcomer gets 503 with a Retry-After (gateway.server.connection_cap).
- Write timeout. uvicorn's `send` waits for the transport to drain once its buffer passes the high
  water mark. If a client reads nothing for `write_timeout`, the connection is aborted and the
  request's `receive` reports a disconnect, so the application stops, closes its upstream request and
  releases what it holds, exactly as when the client leaves. A kept-alive connection whose last
  response the client never read is aborted, not closed, since closing waits for the buffer to drain.
  Aborts reset the connection (SO_LINGER 0), so the kernel drops the unread data at once too. The
  kernel's send buffer is fixed at `send_buffer` (Linux would grow it to 4 MiB): what a stalled
  client makes the gateway relay before the timeout starts is that much, not megabytes.
Refusals are written straight to the transport (gateway.server.refusals).

An application may end a response it cannot finish (a backend body that broke off after the headers
went out) by calling `scope["extensions"][ABORT]()`: the client sees a broken transfer, never a
truncated success.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Callable
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from gateway.config.listen import ListenLimits
from gateway.proxy.asgi import ABORT, GONE
from gateway.proxy.errors import GatewayError
from gateway.server.connection_cap import Connections
from gateway.server.refusals import raw_response, upgrade_refusal

log = logging.getLogger("gateway.server.listener")


LINGER = 2.0
"""Seconds a connection answered 408 mid-body goes on reading, and discarding, before it closes."""


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; `send_400_response` answers `_refusal`."""


def _nothing() -> None:
    pass


class _TimedFlowControl(FlowControl):
    """uvicorn's flow control, with a bound on how long a send may wait for the client to read."""

    def __init__(self, transport: asyncio.Transport, timeout: float, on_stall: Callable[[], None]) -> None:
        super().__init__(transport)
        self._timeout = timeout
        self._on_stall = on_stall

    async def drain(self) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                await super().drain()
        except TimeoutError:
            self._on_stall()

    def detach(self) -> None:
        """Drop the callback into the protocol once its connection is gone."""
        self._on_stall = _nothing


class GuardedProtocol(HttpToolsProtocol):
    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: ListenLimits,
        connections: Connections,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.ws_protocol_class = None  # never hand the transport to another protocol: see the docstring
        self._limits = limits
        self._connections = connections
        self._reading_head = True
        self._head_bytes = 0
        self._header_count = 0
        self._heads = 0
        """Request heads completed on this connection."""
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_due = False
        """A head is complete and its body is not."""
        self._body_started = 0.0
        self._body_bytes = 0
        self._refusal: GatewayError | None = None
        self._lingering = False
        """Answered and half-closed: what the client still sends is read and dropped."""
        self.head_since: float | None = None
        """When the connection was accepted, if earlier than it was set up (held unread by
        gateway.server.acceptor): its first head is due `header_timeout` from then."""

    # -- connection ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = _TimedFlowControl(transport, self._limits.write_timeout, self._write_stalled)
        if not self._connections.admit(self):
            self._refuse(
                GatewayError(
                    503,
                    f"the gateway is at its limit of {self._connections.max_connections} connections",
                    "too_many_connections",
                    retry_after=self._connections.retry_after(),
                )
            )
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._limits.send_buffer)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.closed(self)
        self._cancel_head_timer()
        self._cancel_body_timer()
        super().connection_lost(exc)
        self._client_gone()
        self._unlink()

    def _unlink(self) -> None:
        """Drop the references back to this protocol that a closed connection no longer needs (the
        flow control's stall callback, the request's abort extension), so reference counting frees
        the connection's objects when its request ends. Left in cycles, they wait for the
        collector's full pass, which walks every one of them while the event loop waits."""
        if isinstance(self.flow, _TimedFlowControl):
            self.flow.detach()
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope.get("extensions", {}).pop(ABORT, None)

    def evict(self) -> None:
        """Closed to make room for a new connection (this one had no request in progress)."""
        self._cancel_head_timer()
        self._cancel_body_timer()
        self._reset()

    def timeout_keep_alive_handler(self) -> None:
        if self.transport.get_write_buffer_size():
            self._reset()
        else:
            super().timeout_keep_alive_handler()

    # -- request head --------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return
        self._feed(data)
        # Armed only when a body is still due after this read: most requests arrive whole.
        if self._body_due and self._body_timer is None and not self.transport.is_closing():
            self._body_timer = self.loop.call_at(self._body_deadline(), self._body_check)

    def _feed(self, data: bytes) -> None:
        while True:
            if not self._reading_head:
                self._body_bytes += len(data)
                super().data_received(data)
                return
            if self._head_timer is None:
                self._arm_head_timer()
            room = self._limits.max_header_bytes - self._head_bytes
            if len(data) <= room:
                self._head_bytes += len(data)
                super().data_received(data)
                return
            heads = self._heads
            self._head_bytes += room
            super().data_received(data[:room])
            if self.transport.is_closing():
                return
            if self._heads == heads:
                limit = self._limits.max_header_bytes
                err = GatewayError(431, f"request line and headers exceed {limit} bytes", "headers_too_large")
                self._refuse(err)
                return
            data = data[room:]

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self._limits.max_headers:
            self._refusal = GatewayError(
                431, f"more than {self._limits.max_headers} request headers", "too_many_headers"
            )
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self.parser.should_upgrade():
            self._refusal = upgrade_refusal(self.parser.get_method(), self.headers)
            raise _Refused
        self._heads += 1
        self._reading_head = False
        self._cancel_head_timer()
        self._connections.busy(self)
        super().on_headers_complete()
        self._body_due = True
        self._body_started = self.loop.time()
        self._body_bytes = 0

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["extensions"] = {ABORT: self._abort_exchange}  # type: ignore[dict-item]

    def on_message_complete(self) -> None:
        self._body_due = False
        self._cancel_body_timer()
        super().on_message_complete()
        self._reading_head = True
        self._head_bytes = 0
        self._header_count = 0

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._connections.idle(self)

    def send_400_response(self, msg: str) -> None:
        """The parser refused the head: say why in OpenAI's shape (431 if we stopped it)."""
        refusal, self._refusal = self._refusal, None
        self._refuse(refusal or GatewayError(400, msg, "invalid_http_request"))

    # -- timers and refusals -------------------------------------------------------------------

    def _arm_head_timer(self) -> None:
        since, self.head_since = self.head_since, None
        start = self.loop.time() if since is None else since
        self._head_timer = self.loop.call_at(start + self._limits.header_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _body_deadline(self) -> float:
        limits = self._limits
        return self._body_started + limits.body_timeout + self._body_bytes / limits.body_min_rate

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_check(self) -> None:
        """The body's deadline as it stood when armed has passed: re-arm if bytes arrived since (or
        the application paused reading), else end the request."""
        self._body_timer = None
        now = self.loop.time()
        if self.flow.read_paused:  # the application is behind, not the client: restart the clock
            self._body_started, self._body_bytes = now, 0
        deadline = self._body_deadline()
        if now < deadline:
            self._body_timer = self.loop.call_at(deadline, self._body_check)
            return
        seconds = now - self._body_started
        err = GatewayError(408, f"request body not complete within {seconds:.0f} s", "request_timeout")
        cycle = self.cycle
        if cycle is None or cycle.response_started or self.transport.is_closing():
            self._abort_exchange()
            return
        cycle.disconnected = True  # the application's receive reports a disconnect; its sends are dropped
        cycle.message_event.set()
        self._client_gone()
        self.transport.write(raw_response(err))
        self._linger()

    def _linger(self) -> None:
        """Close after an answer to a client that may still be sending: first only our side (FIN),
        reading and dropping its bytes for `LINGER` seconds, then the socket. Closed at once, a
        socket with unread bytes sends a reset, which can destroy the answer before the client
        reads it (RFC 9112, section 9.6; nginx's and Apache's lingering close)."""
        transport = self.transport
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self._lingering = True
        self.loop.call_later(LINGER, transport.close)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        seconds = self._limits.header_timeout
        self._refuse(GatewayError(408, f"no complete request head within {seconds:g} s", "request_timeout"))

    def _refuse(self, err: GatewayError) -> None:
        """Answer `err` and close; mid-response (a pipelined head) the connection is only aborted."""
        self._cancel_head_timer()
        self._cancel_body_timer()
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self._abort_exchange()
            return
        self.transport.write(raw_response(err))
        self.transport.close()

    def _write_stalled(self) -> None:
        log.info(
            "client %s read nothing for %g s: connection closed",
            f"{self.client[0]}:{self.client[1]}" if self.client else "?",
            self._limits.write_timeout,
        )
        self._abort_exchange()

    def _abort_exchange(self) -> None:
        """Cut the connection; the running request's `receive` reports a disconnect at once."""
        if self.cycle is not None:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
            self._client_gone()
        self._reset()

    def _client_gone(self) -> None:
        """Tell the running request its client is gone, if it asked (the `GONE` extension)."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            extensions: dict[str, Any] = cycle.scope.get("extensions") or {}
            on_gone = extensions.pop(GONE, None)
            if on_gone is not None:
                on_gone()

    def _reset(self) -> None:
        """Abort with a TCP reset. A plain close would leave the kernel holding what the client
        did not read, as an orphaned socket, for as long as the client keeps its window shut."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()
