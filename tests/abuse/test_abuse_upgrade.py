"""Protocol switches the gateway does not serve: a request asking for one (`Upgrade: websocket`,
`h2c`, `CONNECT`) is refused with 400 in OpenAI's shape and its connection closed, and its place
under `listen.max_connections` is given back, so no number of them locks clients out."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest
from abuse_helpers import connect, read_to_end

from tests.procs import Proc, free_port, spawn_gateway, spawn_sim

CAP = 20
WEBSOCKET = (
    b"GET /v1/models HTTP/1.1\r\nHost: gateway\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)
H2C = (
    b"GET /v1/models HTTP/1.1\r\nHost: gateway\r\nConnection: Upgrade, HTTP2-Settings\r\n"
    b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
)
H2C_POST = (
    b"POST /v1/completions HTTP/1.1\r\nHost: gateway\r\nConnection: Upgrade, HTTP2-Settings\r\n"
    b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nContent-Length: 2\r\n\r\n{}"
)
CONNECT = b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n"


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    with spawn_sim("--profile", "tiny-cpu") as proc:
        yield proc


@pytest.fixture(scope="module")
def gw(sim: Proc) -> Iterator[Proc]:
    admin = free_port()
    config = {
        "backends": [sim.url],
        "listen": {"max_connections": CAP},
        "admin": {"host": "127.0.0.1", "port": admin},
    }
    with spawn_gateway(config, ready="/health") as proc:
        proc.admin = f"http://127.0.0.1:{admin}"  # type: ignore[attr-defined]
        yield proc


def refusal(request: bytes, port: int) -> tuple[int, str]:
    sock = connect(port)
    sock.sendall(request)
    answer = read_to_end(sock)  # to the end: the gateway closes the connection after refusing
    sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), orjson.loads(body)["error"]["code"]


@pytest.mark.parametrize(
    "request_", [WEBSOCKET, H2C, H2C_POST, CONNECT], ids=["ws", "h2c", "h2c-post", "connect"]
)
def test_a_protocol_switch_is_refused_in_openai_shape(gw: Proc, request_: bytes) -> None:
    assert refusal(request_, int(gw.url.rsplit(":", 1)[1])) == (400, "unsupported_upgrade")


def test_upgrades_past_the_connection_cap_leave_both_ports_answering(gw: Proc) -> None:
    public = int(gw.url.rsplit(":", 1)[1])
    admin = int(gw.admin.rsplit(":", 1)[1])  # type: ignore[attr-defined]
    for port in (public, admin):
        for _ in range(CAP + 5):
            refusal(WEBSOCKET, port)
    assert httpx.get(f"{gw.url}/health", timeout=5).status_code == 200
    assert httpx.get(f"{gw.admin}/admin/state", timeout=5).status_code == 200  # type: ignore[attr-defined]
    assert "Traceback" not in gw.stderr() and "ERROR" not in gw.stderr()
