"""What the abuse tests share: raw sockets that misbehave, the gateway's state, its log."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import httpx
import orjson

from tests.procs import Proc


def port_of(proc: Proc) -> int:
    return int(proc.url.rsplit(":", 1)[1])


def connect(port: int, *, rcvbuf: int | None = None, timeout: float = 10.0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:  # set before connect, so the advertised window stays small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(timeout)
    sock.connect(("127.0.0.1", port))
    return sock


def post_head(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n".encode()
        + extra
        + b"\r\n"
    )


def stalled_stream(port: int, model: str, max_tokens: int) -> socket.socket:
    """A streaming request whose client reads the first bytes of the answer and then nothing."""
    body = orjson.dumps(
        {"model": model, "prompt": "x", "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    )
    sock = connect(port, rcvbuf=4096)
    sock.sendall(post_head("/v1/completions", body) + body)
    assert sock.recv(64).startswith(b"HTTP/1.1 200")
    return sock


def read_to_end(sock: socket.socket) -> bytes:
    """Everything until the peer closes (or resets) the connection."""
    data = bytearray()
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return bytes(data)


def state(gw: Proc) -> dict:  # type: ignore[type-arg]
    return httpx.get(f"{gw.url}/admin/state", timeout=10).json()  # type: ignore[no-any-return]


def inflight(gw: Proc) -> int:
    return sum(b["inflight"] for b in state(gw)["backends"])


def queued(gw: Proc) -> int:
    return sum(m["depth"] for m in state(gw)["models"].values())


def running_in(sim: Proc) -> float:
    for line in httpx.get(f"{sim.url}/metrics", timeout=10).text.splitlines():
        if line.startswith("vllm:num_requests_running{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("vllm:num_requests_running not exported")


def eventually(check: Callable[[], bool], timeout: float = 15.0, what: str = "") -> None:
    """Poll `check` until it holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.05)
