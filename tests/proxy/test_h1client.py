"""The backend client: kept-alive connections, chunked and close-delimited bodies, broken answers.

Real parts: an asyncio server on loopback that answers each request with the bytes a test gives it,
and records what it received and how many connections it saw.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from gateway.proxy.h1client import (
    HIGH_WATER,
    RECEIVE_BUFFER,
    ConnectFailed,
    H1Client,
    Response,
    ResponseBroken,
)


class RawBackend:
    """Answers the n-th request with `answers[n]`, then closes the connection if it is `CLOSE`-ended
    (nothing but `CLOSE`: closes without answering)."""

    def __init__(self, answers: list[bytes]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.connections = 0
        self.closed = asyncio.Event()
        self.url = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0)
                writer.write(answer.removesuffix(CLOSE))
                await writer.drain()
                if answer.endswith(CLOSE):
                    break
            else:
                await reader.read()  # until the client closes
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed.set()
            writer.close()


@pytest.fixture
async def backend() -> AsyncIterator[RawBackend]:
    raw = RawBackend([])
    server = await asyncio.start_server(raw.serve, "127.0.0.1", 0)
    raw.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        yield raw


CLOSE = b"<close>"
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


async def body_of(client: H1Client, url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    resp = await client.post(url, "/v1/chat/completions", b'{"a":1}', headers or {})
    got = b"".join([chunk async for chunk in resp.chunks()])
    resp.release()
    return resp.status, got


async def test_requests_share_one_kept_alive_connection_and_carry_host_length_and_headers(
    backend: RawBackend,
) -> None:
    backend.answers = [OK, OK, OK]
    client = H1Client(5.0)
    for _ in range(3):
        assert await body_of(client, backend.url, {"content-type": "application/json", "x-a": "é"}) == (
            200,
            b"{}",
        )
    assert backend.connections == 1
    head, _, body = backend.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert f"Host: {backend.url.removeprefix('http://')}".encode() in lines
    assert b"Content-Length: 7" in lines and b"x-a: \xc3\xa9" in lines and b"Accept: */*" in lines
    assert body == b'{"a":1}'
    client.close()


async def test_a_chunked_answer_arrives_decoded_and_connection_close_is_not_reused(
    backend: RawBackend,
) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        b"5\r\ndata:\r\n3\r\n 1\n\r\n0\r\n\r\n" + CLOSE
    )
    backend.answers = [chunked, OK]
    client = H1Client(5.0)
    assert await body_of(client, backend.url) == (200, b"data: 1\n")
    assert await body_of(client, backend.url) == (200, b"{}")
    assert backend.connections == 2
    client.close()


async def test_a_body_without_length_ends_with_the_connection(backend: RawBackend) -> None:
    backend.answers = [b"HTTP/1.1 200 OK\r\n\r\npartial and whole" + CLOSE]
    client = H1Client(5.0)
    assert await body_of(client, backend.url) == (200, b"partial and whole")


async def test_a_connection_lost_before_the_status_fails_to_connect_and_after_it_breaks(
    backend: RawBackend,
) -> None:
    backend.answers = [CLOSE]
    client = H1Client(5.0)
    with pytest.raises(ConnectFailed):
        await body_of(client, backend.url)
    backend.answers = [b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc" + CLOSE]
    resp = await client.post(backend.url, "/", b"", {})
    with pytest.raises(ResponseBroken):
        async for _ in resp.chunks():
            pass
    resp.close()
    client.close()


async def test_nobody_listening_fails_to_connect() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(ConnectFailed):
        await H1Client(5.0).post(f"http://127.0.0.1:{port}", "/", b"", {})


async def test_an_abandoned_answer_closes_its_connection(backend: RawBackend) -> None:
    backend.answers = [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n"]
    client = H1Client(5.0)
    resp = await client.post(backend.url, "/", b"", {})
    async for chunk in resp.chunks():
        assert chunk == b"first"
        break
    resp.close()
    await asyncio.wait_for(backend.closed.wait(), 5)


LONG_ANSWER = 8 * HIGH_WATER


async def post_for_a_long_answer(backend: RawBackend) -> tuple[H1Client, Response]:
    """A client and its exchange with `backend`, which answers LONG_ANSWER bytes at once."""
    head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % LONG_ANSWER
    backend.answers = [head + b"x" * LONG_ANSWER]
    client = H1Client(5.0)
    return client, await client.post(backend.url, "/", b"", {})


async def test_an_answer_nobody_takes_stops_the_reading_past_the_high_water_mark(
    backend: RawBackend,
) -> None:
    client, resp = await post_for_a_long_answer(backend)
    await asyncio.sleep(0.2)  # give the backend time to send what the client would read
    assert resp._conn.buffered <= 2 * HIGH_WATER
    got = b"".join([chunk async for chunk in resp.chunks()])
    assert len(got) == LONG_ANSWER and resp.at_eof()
    resp.release()
    client.close()


async def test_a_backend_connection_reads_at_most_its_fixed_receive_buffer_at_once(
    backend: RawBackend,
) -> None:
    # Linux would grow the buffer to megabytes under a fast stream; fixed, one read is bounded.
    client, resp = await post_for_a_long_answer(backend)
    sock = resp._conn._transport.get_extra_info("socket")
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) <= 2 * RECEIVE_BUFFER
    chunks = [chunk async for chunk in resp.chunks()]
    assert sum(map(len, chunks)) == LONG_ANSWER and max(map(len, chunks)) <= 2 * RECEIVE_BUFFER
    resp.release()
    client.close()
