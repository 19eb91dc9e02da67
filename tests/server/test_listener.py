"""The guarded HTTP/1.1 protocol in-process, over loopback: what counts as the request head."""

from __future__ import annotations

import asyncio
import fcntl
import functools
import gc
import socket
import struct
import termios
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from gateway.config.listen import ListenLimits
from gateway.proxy.asgi import GONE
from gateway.server.connection_cap import Connections
from gateway.server.listener import GuardedProtocol
from gateway.server.serve import bind
from gateway.types import Receive, Scope, Send

LIMITS = ListenLimits(header_timeout=5.0, max_header_bytes=1024, max_headers=10, max_connections=8)


async def echo_length(scope: Scope, receive: Receive, send: Send) -> None:
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = str(size).encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]}
    )  # type: ignore[operator]
    await send({"type": "http.response.body", "body": body})  # type: ignore[operator]


@pytest.fixture
async def port() -> AsyncIterator[int]:
    protocol = functools.partial(
        GuardedProtocol, limits=LIMITS, connections=Connections(LIMITS.max_connections)
    )
    config = uvicorn.Config(echo_length, http=protocol, lifespan="off", log_level="warning")  # type: ignore[arg-type]
    server = uvicorn.Server(config)
    sock = bind("127.0.0.1", 0)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    yield sock.getsockname()[1]  # it listens already: connections wait in the backlog until served
    server.should_exit = True
    await task


async def exchange(port: int, data: bytes, responses: int = 1) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    out = []
    for _ in range(responses):
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.startswith(b"content-length")
        )
        out.append(head.split(b" ", 2)[1] + b" " + await reader.readexactly(length))
    writer.close()
    return out


def post(body: bytes, pad: int = 0) -> bytes:
    return b"POST / HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        b"p" * pad,
        len(body),
        body,
    )


async def test_a_body_behind_a_small_head_is_not_counted_as_head(port: int) -> None:
    assert await exchange(port, post(b"x" * 200_000)) == [b"200 200000"]


async def test_pipelined_requests_in_one_segment_each_get_their_own_budget(port: int) -> None:
    assert await exchange(port, post(b"ab", pad=900) + post(b"abc", pad=900), responses=2) == [
        b"200 2",
        b"200 3",
    ]


async def test_the_head_limit_is_exact(port: int) -> None:
    base = len(post(b"", pad=0))
    assert await exchange(port, post(b"", pad=1024 - base)) == [b"200 0"]
    refused = await exchange(port, post(b"", pad=1025 - base))
    assert refused[0].startswith(b"431 ") and b"headers_too_large" in refused[0]


UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


async def test_protocol_switches_are_refused_and_give_their_place_under_the_cap_back(port: int) -> None:
    # uvicorn's default configuration would hand these to its WebSocket protocol: never done here.
    for _ in range(LIMITS.max_connections + 4):
        refused = await exchange(port, UPGRADE)
        assert refused[0].startswith(b"400 ") and b"unsupported_upgrade" in refused[0]
    assert await exchange(port, post(b"abc")) == [b"200 3"]


BODY_LIMITS = ListenLimits(header_timeout=5.0, body_timeout=0.3, body_min_rate=1000, max_connections=8)


@pytest.fixture
async def body_server() -> AsyncIterator[tuple[int, list[str]]]:
    """A server with a short body timeout whose application records how each request's body ended."""
    ends: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                ends.append("disconnect")
                return
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        ends.append(f"read {size}")
        body = str(size).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})

    protocol = functools.partial(
        GuardedProtocol, limits=BODY_LIMITS, connections=Connections(BODY_LIMITS.max_connections)
    )
    config = uvicorn.Config(
        app,
        http=protocol,  # type: ignore[arg-type]
        lifespan="off",
        log_level="warning",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    sock = bind("127.0.0.1", 0)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    yield sock.getsockname()[1], ends
    server.should_exit = True
    await task


async def answer_to(reader: asyncio.StreamReader) -> bytes:
    """The status line and body of the one answer before the server closes the connection."""
    data = await reader.read()  # until closed
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b" ", 2)[1] + b" " + body


async def test_a_body_that_stalls_is_answered_408_and_the_application_sees_a_disconnect(
    body_server: tuple[int, list[str]],
) -> None:
    port, ends = body_server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
    answer = await asyncio.wait_for(answer_to(reader), 10)
    assert answer.startswith(b"408 ") and b"request_timeout" in answer
    assert ends == ["disconnect"]
    writer.close()


# The trickle goes on after the 408 is written: the server reads and drops it while it lingers, so
# no byte lands on a closed socket and turns the close into a reset that would destroy the answer.
async def test_a_body_trickled_slower_than_the_minimum_rate_is_cut(
    body_server: tuple[int, list[str]],
) -> None:
    port, ends = body_server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    closed = asyncio.create_task(answer_to(reader))
    for _ in range(400):  # one byte each 50 ms is 20 B/s, far below 1,000; 20 s at most
        if closed.done():
            break
        writer.write(b"1\r\nx\r\n")
        await asyncio.sleep(0.05)
    answer = await asyncio.wait_for(closed, 10)
    assert answer.startswith(b"408 ") and b"request_timeout" in answer
    assert ends == ["disconnect"]
    writer.close()


async def test_a_body_sent_steadily_above_the_minimum_rate_may_take_longer_than_the_timeout(
    body_server: tuple[int, list[str]],
) -> None:
    port, ends = body_server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\nConnection: close\r\n\r\n")
    for _ in range(20):  # 200 bytes each 50 ms: 4,000 B/s for about 1 s, against 1,000 B/s and 0.3 s
        writer.write(b"x" * 200)
        await asyncio.sleep(0.05)
    assert await asyncio.wait_for(answer_to(reader), 10) == b"200 4000"
    assert ends == ["read 4000"]
    writer.close()


async def test_a_client_that_stops_reading_gets_no_more_than_the_send_buffer_queued_for_it() -> None:
    """The application writes 16 MiB to a client that reads nothing: what the kernel holds for it
    stays within the configured send buffer (Linux reserves twice the value), not the 4 MiB it
    would grow to."""
    limits = ListenLimits(send_buffer=64 * 1024, write_timeout=30.0, max_connections=8)
    connections = Connections(limits.max_connections)
    stalled = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(256):  # 16 MiB, 64 KiB at a time; sending waits once the client stops reading
            sending = asyncio.ensure_future(
                send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
            )
            done, _ = await asyncio.wait([sending], timeout=0.5)
            if not done:
                stalled.set()
                await sending
        await send({"type": "http.response.body", "body": b""})

    protocol = functools.partial(GuardedProtocol, limits=limits, connections=connections)
    config = uvicorn.Config(
        app,
        http=protocol,
        lifespan="off",
        log_level="warning",
        timeout_graceful_shutdown=1,  # type: ignore[arg-type]
    )
    server = uvicorn.Server(config)
    sock = bind("127.0.0.1", 0)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(client, sock.getsockname())
        await asyncio.get_running_loop().sock_sendall(client, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.wait_for(stalled.wait(), 20)
        (conn,) = list(connections._open)
        server_side = conn.transport.get_extra_info("socket")
        queued = struct.unpack("i", fcntl.ioctl(server_side.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
        assert queued <= 2 * 64 * 1024
    finally:
        client.close()
        server.should_exit = True
        await task


async def test_a_closed_connection_is_freed_by_reference_counting_not_left_to_the_cycle_collector() -> None:
    """A burst of thousands of connections must not leave their objects to the collector's full
    passes, each of which stalls the event loop for as long as it walks them."""
    made: list[weakref.ref[GuardedProtocol]] = []
    all_closed = asyncio.Event()

    class Watched(Connections):
        def closed(self, conn: Any) -> None:
            super().closed(conn)
            if not len(self):
                all_closed.set()

    connections = Watched(LIMITS.max_connections)

    def protocol(*args: Any, **kw: Any) -> GuardedProtocol:
        p = GuardedProtocol(*args, limits=LIMITS, connections=connections, **kw)
        made.append(weakref.ref(p))
        return p

    config = uvicorn.Config(echo_length, http=protocol, lifespan="off", log_level="warning")  # type: ignore[arg-type]
    server = uvicorn.Server(config)
    sock = bind("127.0.0.1", 0)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            all_closed.clear()
            assert await exchange(sock.getsockname()[1], post(b"abc")) == [b"200 3"]
            async with asyncio.timeout(5):
                await all_closed.wait()  # the server saw the client close
        assert [r() for r in made] == [None, None, None]
    finally:
        gc.enable()
        server.should_exit = True
        await task


async def test_the_request_is_called_back_once_when_its_client_leaves_and_not_after_its_answer() -> None:
    calls: list[str] = []
    answered = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # the whole (empty) body
        path = scope["path"]
        scope["extensions"][GONE] = lambda: calls.append(path)
        if path == "/answer":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            answered.set()
        else:
            await asyncio.Event().wait()  # cancelled at shutdown

    protocol = functools.partial(GuardedProtocol, limits=LIMITS, connections=Connections(8))
    config = uvicorn.Config(app, http=protocol, lifespan="off", log_level="warning")  # type: ignore[arg-type]
    server = uvicorn.Server(config)
    sock = bind("127.0.0.1", 0)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    port = sock.getsockname()[1]
    for path in ("/answer", "/wait"):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n" % path.encode())
        if path == "/answer":
            await asyncio.wait_for(answered.wait(), 10)
            await reader.readuntil(b"ok")
        else:
            while not server.server_state.tasks:  # noqa: ASYNC110 - the request has started
                await asyncio.sleep(0.01)
        writer.close()
        await writer.wait_closed()
    for _ in range(500):
        if calls:
            break
        await asyncio.sleep(0.01)  # the server notices the closed connection on its next read
    assert calls == ["/wait"]
    server.should_exit = True
    server.force_exit = True
    await serving
