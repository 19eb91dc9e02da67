"""The probe port: /health and /live answered from a thread on a loopback socket, and answered while
the event loop is blocked, unless it has been blocked for `stall` seconds."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import orjson
import pytest

from gateway.server.probes import ProbeServer
from tests.clock import FakeClock


def ask(port: int, head: bytes) -> tuple[int, bytes]:
    """Send one request head; the status and body of the answer (the server closes after it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    top, _, body = answer.partition(b"\r\n\r\n")
    return int(top.split(b" ", 2)[1]), body


def get(port: int, path: str) -> tuple[int, Any]:
    status, body = ask(port, f"GET {path} HTTP/1.1\r\nhost: probe\r\n\r\n".encode())
    return status, orjson.loads(body)


class Backends:
    """Stands for the application's /health: the status it reports, changed by the test."""

    def __init__(self) -> None:
        self.up = ["a"]

    def health(self) -> tuple[int, Mapping[str, object]]:
        return (200 if self.up else 503), {
            "status": "ok" if self.up else "no healthy backend",
            "backends_up": self.up,
        }


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock
    sock.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(100.0)


@pytest.fixture
def probe(listening: socket.socket, clock: FakeClock) -> Iterator[tuple[ProbeServer, Backends, int]]:
    backends = Backends()
    server = ProbeServer(listening, backends.health, stall=5.0, clock=clock)
    server.start()
    yield server, backends, listening.getsockname()[1]
    server.close()


def test_health_is_the_applications_and_live_only_asks_whether_the_loop_turns(
    probe: tuple[ProbeServer, Backends, int],
) -> None:
    _, backends, port = probe
    assert get(port, "/health") == (200, {"status": "ok", "backends_up": ["a"]})
    backends.up = []
    assert get(port, "/health") == (503, {"status": "no healthy backend", "backends_up": []})
    assert get(port, "/live?verbose=1") == (200, {"status": "ok"})  # an outage must not restart it


def test_a_loop_without_a_heartbeat_for_stall_seconds_fails_both(
    probe: tuple[ProbeServer, Backends, int], clock: FakeClock
) -> None:
    server, _, port = probe
    clock.now += 5.5
    for path in ("/health", "/live"):
        status, body = get(port, path)
        assert (status, body["status"]) == (503, "event loop stalled")
    server.beat()
    assert get(port, "/live")[0] == 200


def test_other_paths_methods_and_heads_get_openai_errors(probe: tuple[ProbeServer, Backends, int]) -> None:
    _, _, port = probe
    status, body = get(port, "/metrics")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, raw = ask(port, b"POST /health HTTP/1.1\r\ncontent-length: 0\r\n\r\n")
    assert status == 405 and orjson.loads(raw)["error"]["code"] == "method_not_allowed"
    status, raw = ask(port, b"garbage\r\n\r\n")
    assert status == 400 and orjson.loads(raw)["error"]["code"] == "bad_request"
    assert ask(port, b"HEAD /health HTTP/1.1\r\n\r\n") == (200, b"")


def test_a_connection_that_sends_nothing_does_not_keep_the_next_probe_out(
    probe: tuple[ProbeServer, Backends, int],
) -> None:
    _, _, port = probe
    with socket.create_connection(("127.0.0.1", port)):  # silent until the server's TIMEOUT
        assert get(port, "/live")[0] == 200


async def test_probes_are_answered_while_the_event_loop_is_blocked(listening: socket.socket) -> None:
    backends = Backends()
    server = ProbeServer(listening, backends.health)
    server.start()
    beating = asyncio.create_task(server.heartbeat())
    await asyncio.sleep(0)
    answered = threading.Event()
    seen: list[int] = []

    def probe() -> None:
        seen.append(get(listening.getsockname()[1], "/health")[0])
        answered.set()

    threading.Thread(target=probe).start()
    # The loop is blocked until the probe has its answer: were the answer the loop's, it never would.
    assert answered.wait(timeout=30)
    assert seen == [200]
    beating.cancel()
    server.close()
