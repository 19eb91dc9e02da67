"""Backends that break off an answer: a stream that goes silent ends with an in-band error whose
code is the status the metrics record (504), and a body shorter than its Content-Length reaches
the client as a failed transfer, never as a truncated 200, with no traceback in the log."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import httpx
import orjson
import pytest
from abuse_helpers import eventually, inflight

from tests.procs import free_port, spawn_gateway, spawn_sim

MODEL = "tiny-llama"


def requests_with_status(metrics: str, status: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("gateway_requests_total{") and f'status="{status}"' in line
    )


def test_a_stream_that_goes_silent_ends_with_an_in_band_504() -> None:
    config = {"timeouts": {"idle": 0.5}, "health": {"interval": 60}}
    with (
        spawn_sim("--profile", "tiny-cpu", "--speed", "0.1") as sim,
        spawn_gateway({**config, "backends": [sim.url]}) as gw,
    ):
        body = {"model": MODEL, "prompt": "go", "max_tokens": 500, "stream": True, "ignore_eos": True}
        events: list[str] = []
        with httpx.stream("POST", f"{gw.url}/v1/completions", json=body, timeout=30) as resp:
            for line in resp.iter_lines():
                if line and not events:
                    httpx.post(f"{sim.url}/sim/faults", json={"hang": True})
                events.append(line)
        error = orjson.loads(next(e for e in events if e.startswith('data: {"error"'))[6:])["error"]
        assert error["code"] == 504 and "idle timeout" in error["message"]
        assert requests_with_status(httpx.get(f"{gw.url}/metrics").text, "504") == 1
        httpx.post(f"{sim.url}/sim/faults", json={"reset": True})


async def short_body_backend(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers health checks; answers a completion with 40 of the 100 bytes it announces."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    await reader.readexactly(length)
    if head.startswith(b"POST"):
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n" + b"{" * 40
        )
    else:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}")
    await writer.drain()
    writer.close()


@pytest.fixture
def broken_backend() -> Iterator[str]:
    loop = asyncio.new_event_loop()
    port = free_port()
    server = loop.run_until_complete(asyncio.start_server(short_body_backend, "127.0.0.1", port))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_a_body_shorter_than_its_content_length_is_a_failed_transfer(broken_backend: str) -> None:
    config = {"backends": [{"url": broken_backend, "models": ["m"]}], "health": {"interval": 60}}
    with spawn_gateway(config) as gw:
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):  # reset, or cut short
            httpx.post(f"{gw.url}/v1/completions", json={"model": "m", "prompt": "x"}, timeout=10)
        eventually(lambda: inflight(gw) == 0, what="slot released")
        assert requests_with_status(httpx.get(f"{gw.url}/metrics").text, "502") == 1
        log = gw.stderr()
    assert "Traceback" not in log
