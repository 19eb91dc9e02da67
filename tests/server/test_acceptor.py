"""The acceptor over loopback: connections are served, at most `batch` are taken per call, it stops
when closed and pauses when accepting fails for lack of descriptors; connections that send nothing
are held unread under the connection cap until they do."""

from __future__ import annotations

import asyncio
import errno
import socket

import pytest

from gateway.server import acceptor as acceptor_module
from gateway.server.acceptor import Acceptor
from gateway.server.connection_cap import Connections
from gateway.server.serve import bind


class Echo(asyncio.Protocol):
    """Answers each chunk with itself; counts the connections made."""

    made: list[Echo]

    def __init__(self, made: list[Echo]) -> None:
        self.made = made
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.made.append(self)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)


async def echo_once(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    got = await reader.readexactly(len(data))
    writer.close()
    await writer.wait_closed()
    return got


async def test_every_connection_of_a_burst_is_served() -> None:
    made: list[Echo] = []
    with bind("127.0.0.1", 0) as sock:
        acceptor = Acceptor(sock, lambda: Echo(made), batch=4)
        port = sock.getsockname()[1]
        answers = await asyncio.gather(*(echo_once(port, b"%d" % i) for i in range(50)))
        acceptor.close()
    assert answers == [b"%d" % i for i in range(50)]
    assert len(made) == 50


async def connections_made(made: list[Echo], n: int) -> int:
    """Let the loop run the set-up tasks until `n` connections are made (or it stops changing)."""
    for _ in range(100):
        if len(made) >= n:
            break
        await asyncio.sleep(0)
    return len(made)


async def test_one_call_accepts_at_most_batch_connections() -> None:
    made: list[Echo] = []
    with bind("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]
        # The handshakes complete in the kernel; the connections wait in the listen backlog.
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
        acceptor = Acceptor(sock, lambda: Echo(made), batch=3)
        acceptor.close()  # from here only the direct calls below accept
        acceptor.accept_ready()
        assert await connections_made(made, 3) == 3
        acceptor.accept_ready()
        assert await connections_made(made, 6) == 6
        sock.setblocking(True)
        sock.settimeout(5)
        left = [sock.accept()[0] for _ in range(4)]  # the other four are still in the backlog
        for conn in [*left, *clients]:
            conn.close()
        for protocol in made:
            assert protocol.transport is not None
            protocol.transport.close()


async def test_closed_acceptor_leaves_new_connections_in_the_backlog() -> None:
    made: list[Echo] = []
    with bind("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]
        acceptor = Acceptor(sock, lambda: Echo(made), batch=4)
        assert await echo_once(port, b"before") == b"before"
        acceptor.close()
        client = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(True)
        sock.settimeout(5)
        pending, _ = sock.accept()  # still there: nobody took it
        pending.close()
        client.close()
    assert len(made) == 1


class OutOfDescriptors:
    """A listening socket whose accept fails with EMFILE a given number of times, then delegates."""

    def __init__(self, real: socket.socket, failures: int) -> None:
        self.real = real
        self.failures = failures

    def fileno(self) -> int:
        return self.real.fileno()

    def setblocking(self, flag: bool) -> None:
        self.real.setblocking(flag)

    def accept(self) -> tuple[socket.socket, object]:
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return self.real.accept()


async def test_out_of_descriptors_pauses_then_accepts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(acceptor_module, "PAUSE", 0.05)
    made: list[Echo] = []
    with bind("127.0.0.1", 0) as real:
        failing = OutOfDescriptors(real, failures=1)
        acceptor = Acceptor(failing, lambda: Echo(made), batch=4)  # type: ignore[arg-type]
        answer = await asyncio.wait_for(echo_once(real.getsockname()[1], b"late"), timeout=10)
        acceptor.close()
    assert answer == b"late"
    assert failing.failures == 0
    assert "accepting paused" in caplog.text


async def settled(acceptor: Acceptor, made: list[Echo], unread: int, set_up: int) -> tuple[int, int]:
    """Let the loop run until `unread` connections are held and `set_up` made (or 5 s pass)."""
    async with asyncio.timeout(5):
        while (acceptor.unread, len(made)) != (unread, set_up):  # noqa: ASYNC110 - set in loop callbacks
            await asyncio.sleep(0.01)
    return acceptor.unread, len(made)


async def test_silent_connections_are_held_unread_until_their_first_bytes() -> None:
    made: list[Echo] = []
    cap = Connections(8)
    with bind("127.0.0.1", 0) as sock:
        acceptor = Acceptor(sock, lambda: Echo(made), connections=cap, header_timeout=30)
        port = sock.getsockname()[1]
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        assert await settled(acceptor, made, unread=5, set_up=0) == (5, 0)
        assert len(cap) == 5  # counted under the cap all the same
        assert await echo_once(port, b"at once") == b"at once"  # one that sends is served at once
        silent[0].sendall(b"late")
        silent[0].settimeout(5)
        assert await asyncio.to_thread(silent[0].recv, 4) == b"late"
        assert (acceptor.unread, len(made)) == (4, 2)
        silent[1].close()  # gone before a byte: closed, never set up
        assert await settled(acceptor, made, unread=3, set_up=2) == (3, 2)
        acceptor.close()  # the ones still silent are closed with it
        silent[2].settimeout(5)
        assert acceptor.unread == 0 and await asyncio.to_thread(silent[2].recv, 16) == b""
        for client in silent:
            client.close()
        for protocol in made:
            assert protocol.transport is not None
            protocol.transport.close()


async def test_a_silent_connection_makes_room_and_times_out_with_408() -> None:
    made: list[Echo] = []
    now = [100.0]
    cap = Connections(1, clock=lambda: now[0])
    with bind("127.0.0.1", 0) as sock:
        acceptor = Acceptor(sock, lambda: Echo(made), connections=cap, header_timeout=0.2)
        port = sock.getsockname()[1]
        first = socket.create_connection(("127.0.0.1", port))
        first.settimeout(5)
        assert await settled(acceptor, made, unread=1, set_up=0) == (1, 0)
        now[0] += 2  # the one held has been silent long enough to make room
        second = socket.create_connection(("127.0.0.1", port))
        second.settimeout(5)
        with pytest.raises(ConnectionResetError):  # evicted to make room for the second
            await asyncio.to_thread(first.recv, 16)
        answer = await asyncio.to_thread(second.recv, 4096)  # nothing sent within header_timeout
        assert answer.startswith(b"HTTP/1.1 408 ") and b"request_timeout" in answer
        assert (acceptor.unread, len(cap), made) == (0, 0, [])
        acceptor.close()
        first.close()
        second.close()
