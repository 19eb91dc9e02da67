"""`n` > 1: a request the engine runs as n sequences counts n in flight against the backend's limit,
so a client cannot put n times the limit's work on a backend with one request per slot."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import orjson
import pytest
from abuse_helpers import connect, eventually, inflight, port_of, post_head, queued

from tests.procs import Proc, spawn_gateway, spawn_sim


@pytest.fixture(scope="module")
def gw() -> Iterator[Proc]:
    with spawn_sim("--profile", "tiny-cpu", "--speed", "0.2") as sim:
        config = {"backends": [sim.url], "controller": {"algorithm": "fixed", "params": {"limit": 4}}}
        with spawn_gateway(config) as proc:
            yield proc


def stream(gw: Proc, n: int) -> socket.socket:
    body = orjson.dumps(
        {"model": "tiny-llama", "prompt": "x", "max_tokens": 5000, "stream": True, "ignore_eos": True, "n": n}
    )
    sock = connect(port_of(gw))
    sock.sendall(post_head("/v1/completions", body) + body)
    return sock


def test_n_sequences_count_n_in_flight_and_the_next_request_waits(gw: Proc) -> None:
    socks = [stream(gw, 3)]
    try:
        eventually(lambda: inflight(gw) == 3, what="one request of n=3 counted 3")
        socks.append(stream(gw, 1))
        eventually(lambda: inflight(gw) == 4, what="the limit of 4 held")
        socks.append(stream(gw, 1))
        eventually(lambda: queued(gw) == 1, what="a fifth sequence waits")
    finally:
        for sock in socks:
            sock.close()
    eventually(lambda: inflight(gw) == 0 and queued(gw) == 0, what="all released")
