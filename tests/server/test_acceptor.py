"""The acceptor over loopback: connections are served, at most `batch` are taken per call, it stops
when closed and pauses when accepting fails for lack of descriptors."""

from __future__ import annotations

import asyncio
import errno
import socket

import pytest

from gateway.server import acceptor as acceptor_module
from gateway.server.acceptor import Acceptor
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
