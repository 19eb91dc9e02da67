"""What a client can hold before it sends a request: connections that never send a complete head
are closed after `listen.header_timeout`, requests whose body stalls after `listen.body_timeout`,
oversized heads are refused with 431 before the parser holds them, and neither a connection flood
nor the process's descriptor limit locks clients out, nor a full public port operators."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from abuse_helpers import connect, eventually, port_of, post_head, read_to_end, running_in

from tests.procs import Proc, free_port, spawn_gateway, spawn_sim


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    with spawn_sim("--profile", "tiny-cpu", "--speed", "0.2") as proc:
        yield proc


@pytest.fixture(scope="module")
def gw(sim: Proc) -> Iterator[Proc]:
    listen = {
        "header_timeout": 0.5,
        "body_timeout": 0.5,
        "max_header_bytes": 8192,
        "max_headers": 20,
        "max_connections": 6,
    }
    with spawn_gateway({"backends": [sim.url], "listen": listen}) as proc:
        yield proc


def error_of(response: bytes) -> tuple[int, str]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), orjson.loads(body)["error"]["code"]


def retry_after_ms(response: bytes) -> int:
    head = response.partition(b"\r\n\r\n")[0].decode()
    return int(next(line.split(":")[1] for line in head.split("\r\n") if line.startswith("retry-after-ms")))


@pytest.mark.parametrize("sent", [b"", b"GET /hea", b"GET /health HTTP/1.1\r\nHost: x\r\n"])
def test_a_request_head_that_does_not_arrive_in_time_is_answered_408_and_closed(
    gw: Proc, sent: bytes
) -> None:
    sock = connect(port_of(gw), timeout=10)
    sock.sendall(sent)
    assert error_of(read_to_end(sock)) == (408, "request_timeout")  # read_to_end: then closed


def test_a_request_whose_body_stalls_is_answered_408_and_closed(gw: Proc) -> None:
    body = orjson.dumps({"model": "tiny-llama", "prompt": "x", "max_tokens": 10})
    sock = connect(port_of(gw), timeout=10)
    sock.sendall(post_head("/v1/completions", body) + body[:10])
    assert error_of(read_to_end(sock)) == (408, "request_timeout")  # then closed
    assert httpx.post(f"{gw.url}/v1/completions", content=body, timeout=10).status_code == 200


def test_an_oversized_header_is_refused_before_it_is_read(gw: Proc) -> None:
    sock = connect(port_of(gw))
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Huge: ")
    sent = 0
    with pytest.raises(OSError):  # the gateway answers and closes long before 64 MiB arrive
        while sent < 64 << 20:
            sent += sock.send(b"a" * 65536)
    assert error_of(read_to_end(sock)) == (431, "headers_too_large")
    assert sent < 16 << 20
    assert httpx.get(f"{gw.url}/health").status_code == 200


def test_too_many_headers_are_refused(gw: Proc) -> None:
    sock = connect(port_of(gw))
    sock.sendall(b"GET /health HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(21)) + b"\r\n")
    assert error_of(read_to_end(sock)) == (431, "too_many_headers")


def test_at_the_connection_cap_the_longest_idle_connection_makes_room(gw: Proc) -> None:
    idle = [connect(port_of(gw)) for _ in range(6)]
    for sock in idle:  # each asks once and keeps its connection open, as a pooling client does
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while not answer.endswith(b"\r\n0\r\n\r\n"):  # the whole chunked answer
            answer += sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200")
    assert httpx.get(f"{gw.url}/health", timeout=5).status_code == 200
    assert read_to_end(idle[0]) == b""  # the oldest idle one was closed, without an answer
    for sock in idle:
        sock.close()


@pytest.mark.serial
def test_at_the_cap_with_nothing_idle_newcomers_are_answered_503_with_spread_advice(
    gw: Proc, sim: Proc
) -> None:
    body = orjson.dumps({"model": "tiny-llama", "prompt": "x", "max_tokens": 1000, "stream": True})
    busy = [connect(port_of(gw)) for _ in range(6)]
    try:
        for sock in busy:
            sock.sendall(post_head("/v1/completions", body) + body)
        # Asked of the backend: a request to the gateway would take a seventh connection.
        eventually(lambda: running_in(sim) == 6, what="six streams running")
        refusals = [read_to_end(connect(port_of(gw))) for _ in range(5)]
        assert {error_of(r) for r in refusals} == {(503, "too_many_connections")}
        # Refused together, told to come back at different times: not all in the same instant.
        advice = [retry_after_ms(r) for r in refusals]
        assert len(set(advice)) == len(advice) and min(advice) >= 50
    finally:
        for sock in busy:
            sock.close()


def test_the_admin_port_is_reachable_while_the_public_port_is_full(sim: Proc) -> None:
    admin_port = free_port()
    config = {
        "backends": [sim.url],
        "listen": {"max_connections": 4},
        "admin": {"host": "127.0.0.1", "port": admin_port},
    }
    body = orjson.dumps({"model": "tiny-llama", "prompt": "x", "max_tokens": 1000, "stream": True})
    with spawn_gateway(config, ready="/v1/models") as gw:
        before = running_in(sim)
        busy = [connect(port_of(gw)) for _ in range(4)]
        try:
            for sock in busy:
                sock.sendall(post_head("/v1/completions", body) + body)
            eventually(lambda: running_in(sim) == before + 4, what="four streams running")
            assert error_of(read_to_end(connect(port_of(gw)))) == (503, "too_many_connections")
            admin = f"http://127.0.0.1:{admin_port}"
            assert httpx.get(f"{admin}/health", timeout=5).status_code == 200
            assert httpx.get(f"{admin}/admin/state", timeout=5).status_code == 200
        finally:
            for sock in busy:
                sock.close()


def test_idle_connections_beyond_the_soft_descriptor_limit_do_not_lock_clients_out(sim: Proc) -> None:
    # Started with a soft limit of 256 descriptors (and the machine's hard limit), as a service
    # manager's default of 1,024 would: the gateway raises it at start.
    with spawn_gateway({"backends": [sim.url]}, prefix=["prlimit", "--nofile=256:"]) as gw:
        idle = [connect(port_of(gw)) for _ in range(400)]
        try:
            assert httpx.get(f"{gw.url}/v1/models", timeout=5).status_code == 200
        finally:
            for sock in idle:
                sock.close()
        limits = Path(f"/proc/{gw.pid}/limits").read_text()
    soft, hard = next(line.split()[3:5] for line in limits.splitlines() if line.startswith("Max open files"))
    assert soft == hard
