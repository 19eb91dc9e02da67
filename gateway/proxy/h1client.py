"""The HTTP/1.1 client of the exchanges with backends: kept-alive connections, httptools parsing.

One POST per exchange, its body whole, its answer handed on chunk by chunk as it arrives. A general
client (aiohttp) spends more on each request than the proxying around it (request and response
objects, header multidicts, timers, payload adapters); this one writes the request in one buffer and
parses the answer with the same C parser (llhttp, through httptools) the server side uses.

Connections: per origin (scheme, host, port), idle connections are kept and reused newest first;
one idle longer than `keepalive` seconds, or that the backend closed, is not reused. A connection
goes back only after a complete answer that allows keep-alive (`Connection: close`, HTTP/1.0 and
bodies read to the end of the connection do not); `Response.close()` abandons one, which is how the
backend learns that its request was given up (vLLM aborts the sequence and frees its KV blocks).

Errors: `ConnectFailed` before the answer's head arrived (no connection, refused, closed or
unparsable before a status): nothing reached the client, the request may go elsewhere.
`ResponseBroken` after it (the connection dropped or the body did not parse). A request is never
resent on another connection by this client: a POST that the backend may have started is not
repeated behind the caller's back.

Flow control: past `HIGH_WATER` bytes received and not yet taken, the connection stops reading
until the caller takes them, so a slow client holds that much per exchange, not the whole answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator
from typing import cast
from urllib.parse import urlsplit

import httptools

HIGH_WATER = 256 * 1024
RECEIVE_BUFFER = 64 * 1024
"""The kernel's receive buffer of each backend connection, in bytes (Linux reserves twice this).

It bounds what one read of a backend's answer returns, and so the work one stream's relay does in
one turn of the event loop: every event in a read is counted and written on in that turn. Left to
itself Linux grows the buffer to megabytes, and a backend that streams faster than its client reads
(or than the loop relays) then hands over hundreds of kilobytes, thousands of events, per read;
with a few such streams ready together a turn lasts tens of milliseconds, during which nothing
else, /health included, is answered. 64 KiB still carries tens of megabytes per second per
connection at the round trip of a backend nearby."""
DEFAULT_KEEPALIVE = 15.0
"""Seconds an idle connection is trusted to be still open (aiohttp's default too)."""


class ConnectFailed(Exception):
    """No answer began: the connection failed, or broke before the answer's status line."""


class ResponseBroken(Exception):
    """The answer broke off after its head: the connection dropped or its body did not parse."""


class Origin:
    """Where a backend URL's requests go, and its idle connections."""

    __slots__ = ("host", "host_line", "idle", "port", "prefix", "ssl")

    def __init__(self, url: str) -> None:
        parsed = urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parsed.hostname.encode("idna").decode("ascii")
        self.port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = ssl.create_default_context() if parsed.scheme == "https" else None
        host = f"[{self.host}]" if ":" in self.host else self.host
        authority = host if parsed.port is None else f"{host}:{self.port}"
        self.host_line = f"Host: {authority}\r\n".encode("ascii")
        self.prefix = parsed.path.rstrip("/").encode()
        self.idle: list[_Connection] = []


class H1Client:
    """POSTs to backends over kept-alive connections (see the module doc)."""

    def __init__(self, connect_timeout: float | None, keepalive: float = DEFAULT_KEEPALIVE) -> None:
        self.connect_timeout = connect_timeout
        self._keepalive = keepalive
        self._origins: dict[str, Origin] = {}
        self._closed = False

    async def post(self, url: str, path: str, body: bytes, headers: dict[str, str]) -> Response:
        """Send the request and wait for the answer's head; its body is read through the `Response`."""
        origin = self._origins.get(url)
        if origin is None:
            origin = self._origins[url] = Origin(url)
        conn = self._idle(origin) or await self._connect(origin)
        lines = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
        if "accept" not in headers:
            lines += "Accept: */*\r\n"
        if "content-type" not in headers:
            lines += "Content-Type: application/octet-stream\r\n"
        head = b"POST %s%s HTTP/1.1\r\n%s%sContent-Length: %d\r\n\r\n" % (
            origin.prefix,
            path.encode(),
            origin.host_line,
            lines.encode(),
            len(body),
        )
        return await conn.send(head, body)

    def close(self) -> None:
        """Close the idle connections; those in use close when their exchange ends."""
        self._closed = True
        for origin in self._origins.values():
            for conn in origin.idle:
                conn.abort()
            origin.idle.clear()

    def _idle(self, origin: Origin) -> _Connection | None:
        idle = origin.idle
        while idle:
            conn = idle.pop()
            if conn.reusable(self._keepalive):
                return conn
            conn.abort()
        return None

    async def _connect(self, origin: Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        if self._closed:
            raise ConnectFailed("the client is closed")
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(origin, self), origin.host, origin.port, ssl=origin.ssl
                )
        except TimeoutError:
            raise ConnectFailed(f"connecting took over {self.connect_timeout:g} s") from None
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {origin.host}:{origin.port}: {exc}") from exc
        return conn

    def _release(self, conn: _Connection) -> None:
        if self._closed:
            conn.abort()
        else:
            conn.origin.idle.append(conn)


class Response:
    """One answer under way: its status and headers (names in lower case, values as sent), then its
    body through `chunks()`."""

    __slots__ = ("_conn", "_taken", "raw_headers", "status")

    def __init__(self, conn: _Connection, status: int, raw_headers: list[tuple[bytes, bytes]]) -> None:
        self._conn = conn
        self._taken = False
        self.status = status
        self.raw_headers = raw_headers

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives: all that came since the last one, until the answer is complete."""
        conn = self._conn
        while True:
            chunk = conn.take()
            if chunk:
                yield chunk
            elif conn.complete:
                return
            else:
                await conn.wait()

    def at_eof(self) -> bool:
        """Whether the whole body has arrived and been taken."""
        return self._conn.complete and not self._conn.buffered

    async def read(self, limit: int) -> bytes:
        """The start of the body, up to `limit` bytes (what arrived; the rest is left unread)."""
        got = b""
        async for chunk in self.chunks():
            got += chunk
            if len(got) >= limit:
                break
        return got[:limit]

    def release(self) -> None:
        """The exchange is over: the connection is kept if the answer was complete and allows it."""
        if not self._taken:
            self._taken = True
            self._conn.finish()

    def close(self) -> None:
        """Abandon the answer: the connection is closed, whatever was still to come."""
        if not self._taken:
            self._taken = True
            self._conn.abort()


class _Connection(asyncio.Protocol):
    """One connection to a backend, one exchange at a time."""

    def __init__(self, origin: Origin, client: H1Client) -> None:
        self.origin = origin
        self._client = client
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._head: asyncio.Future[Response] | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._chunks: list[bytes] = []
        self.buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._error: ResponseBroken | None = None
        self._until_close = False
        self._keep_alive = False
        self._paused = False
        self.complete = False
        self._lost = False
        self._idle_since = 0.0

    # -- the exchange's side --------------------------------------------------------------------

    async def send(self, head: bytes, body: bytes) -> Response:
        assert self._transport is not None
        self._head = self._loop.create_future()
        self._headers, self._chunks, self.buffered = [], [], 0
        self.complete, self._error, self._until_close, self._keep_alive = False, None, False, False
        self._transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            self._transport.write(body)
        try:
            return await self._head
        except BaseException:
            self.abort()
            raise

    def reusable(self, keepalive: float) -> bool:
        return not self._lost and self._loop.time() - self._idle_since < keepalive

    def take(self) -> bytes:
        chunks = self._chunks
        if not chunks:
            if self._error is not None:
                raise self._error
            return b""
        chunk = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self.buffered = 0
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return chunk

    async def wait(self) -> None:
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def finish(self) -> None:
        """The caller is done: back to the pool if the answer completed on a reusable connection."""
        if self.complete and self._keep_alive and not self._lost:
            self._idle_since = self._loop.time()
            self._head = None
            self._client._release(self)
        else:
            self.abort()

    def abort(self) -> None:
        self._lost = True
        if self._transport is not None:
            self._transport.abort()

    # -- the protocol's side --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's does not subclass asyncio's
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        head = self._head
        if head is not None and head.done() and self._until_close and not self._error:
            self._done()  # a body delimited by the end of the connection has ended
        elif not self.complete:
            self._fail(exc or ConnectionResetError("the backend closed the connection"))
        with contextlib.suppress(ValueError):  # not idle: in use, or already taken out
            self.origin.idle.remove(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        self._until_close = not any(
            n in (b"content-length", b"transfer-encoding") for n, _ in self._headers
        ) and not (status < 200 or status in (204, 304))
        head = self._head
        if head is not None and not head.done():
            head.set_result(Response(self, status, self._headers))

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self._until_close = False
        self._keep_alive = self._parser.should_keep_alive()  # only known inside the callback
        self._done()

    def _done(self) -> None:
        self.complete = True
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        head = self._head
        if head is not None and not head.done():
            head.set_exception(ConnectFailed(f"no answer: {exc!r}"))
        elif not self.complete:
            self._error = ResponseBroken(f"the answer broke off: {exc!r}")
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
