"""The attacks a careless or hostile client can make on the gateway, each an asyncio task that keeps
it up until told to stop.

Every attack is persistent: a connection the gateway closes is opened again, as an attacker would.
A connection's fate is read from the kernel (TCP_INFO's state), since the attacks never read.

- slow readers: streaming requests whose clients read the first bytes and then nothing;
- idle connections: connections that send nothing, or half a request line;
- huge header: one connection sending a single header value without end;
- reload storm: the config file rewritten (a backend removed and added back, the queue timeout
  changed) and SIGHUP sent, every second;
- invented models, oversized names, SDK burst: what clients do through the API itself
  (`loadtests.client_attacks`): a new model name per request, 1 MB model names with 16 KB request
  ids, and 5,000 concurrent OpenAI SDK requests with default retries (a burst lasts until all are
  answered, so this attack may outlast the others).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import yaml

from loadtests import client_attacks

_ESTABLISHED = 1


@dataclass
class Target:
    port: int
    pid: int
    model: str
    config_path: Path
    config: dict[str, object]
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n


Attack = Callable[[Target, asyncio.Event], Awaitable[None]]


def established(sock: socket.socket) -> bool:
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    except OSError:
        return False
    return struct.unpack("B", info[:1])[0] == _ESTABLISHED


async def open_socket(port: int, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    try:
        async with asyncio.timeout(5):
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return sock


async def hold(
    open_one: Callable[[], Awaitable[socket.socket]], n: int, t: Target, stop: asyncio.Event
) -> None:
    """Keep `n` connections made by `open_one` established until `stop`; reopen what closes."""
    socks: list[socket.socket | None] = [None] * n
    try:
        while not stop.is_set():
            for i, sock in enumerate(socks):
                if sock is not None and established(sock):
                    continue
                if sock is not None:
                    sock.close()
                    t.count("closed by the gateway")
                try:
                    socks[i] = await open_one()
                    t.count("opened")
                except (OSError, TimeoutError):
                    socks[i] = None
                    t.count("failed to open")
                if stop.is_set():
                    break
            await asyncio.sleep(0.25)
    finally:
        for sock in socks:
            if sock is not None:
                sock.close()


async def slow_readers(t: Target, stop: asyncio.Event, n: int = 8) -> None:
    body = orjson.dumps(
        {"model": t.model, "prompt": "x", "max_tokens": 30_000, "stream": True, "ignore_eos": True}
    )
    head = b"POST /v1/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
    request = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    loop = asyncio.get_running_loop()

    async def stalled() -> socket.socket:
        sock = await open_socket(t.port, rcvbuf=4096)
        await loop.sock_sendall(sock, request)
        await loop.sock_recv(sock, 64)  # the first bytes, and never again
        return sock

    await hold(stalled, n, t, stop)


async def idle_connections(t: Target, stop: asyncio.Event, n: int = 1100, half: int = 100) -> None:
    loop = asyncio.get_running_loop()
    opened = 0

    async def idle() -> socket.socket:
        nonlocal opened
        sock = await open_socket(t.port)
        opened += 1
        if opened % (n // half) == 0:
            await loop.sock_sendall(sock, b"GET /heal")
        return sock

    await hold(idle, n, t, stop)


async def huge_header(t: Target, stop: asyncio.Event, chunk: int = 1 << 16, most: int = 1 << 30) -> None:
    loop = asyncio.get_running_loop()
    data = b"a" * chunk
    while not stop.is_set():
        try:
            sock = await open_socket(t.port)
        except (OSError, TimeoutError):
            t.count("failed to open")
            await asyncio.sleep(0.1)
            continue
        sent = 0
        try:
            await loop.sock_sendall(sock, b"GET /health HTTP/1.1\r\nHost: gateway\r\nX-Huge: ")
            while sent < most and not stop.is_set():
                await loop.sock_sendall(sock, data)
                sent += chunk
        except OSError:
            t.count("closed by the gateway")
        finally:
            sock.close()
            t.count("MiB sent", sent >> 20)


async def reload_storm(t: Target, stop: asyncio.Event, every: float = 1.0) -> None:
    full = t.config
    backends = full["backends"]
    assert isinstance(backends, list)
    variants = [{**full, "backends": backends[:1], "queue": {"timeout": 20}}, full]
    i = 0
    while not stop.is_set():
        await asyncio.sleep(every)
        tmp = t.config_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(variants[i % 2]))
        tmp.replace(t.config_path)
        i += 1
        try:
            os.kill(t.pid, signal.SIGHUP)
            t.count("reloads")
        except ProcessLookupError:
            t.count("gateway gone")
            return


async def invented_models(t: Target, stop: asyncio.Event) -> None:
    await client_attacks.unknown_models(f"http://127.0.0.1:{t.port}", stop, t.count)


async def oversized_names(t: Target, stop: asyncio.Event) -> None:
    await client_attacks.oversized_names(f"http://127.0.0.1:{t.port}", stop, t.count)


async def sdk_burst(t: Target, stop: asyncio.Event) -> None:
    await client_attacks.sdk_bursts(f"http://127.0.0.1:{t.port}", stop, t.count, model=t.model)


ATTACKS: dict[str, Attack] = {
    "slow readers": slow_readers,
    "idle connections": idle_connections,
    "huge header": huge_header,
    "reload storm": reload_storm,
    "invented models": invented_models,
    "oversized names": oversized_names,
    "SDK burst": sdk_burst,
}
