"""The forwarder: a request whose backend fails is retried elsewhere through the admission queue.

Real parts: the pool with real limiters, the admission queue, the aiohttp upstream client, and two
HTTP servers on loopback (one refusing with 503 when told to, one answering).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gateway.admission import Ticket
from gateway.admission.model_queues import ModelQueues
from gateway.config import BackendConfig, HealthConfig, TimeoutConfig, parse_config
from gateway.control import algorithms
from gateway.control.limiter import Limiter
from gateway.metrics import Metrics
from gateway.metrics.telemetry import Telemetry
from gateway.pool.backends import Backend
from gateway.pool.pool import Pool
from gateway.proxy.errors import GatewayError
from gateway.proxy.forwarder import Forwarder, Outbound, Outcome
from gateway.proxy.upstream import Upstream
from gateway.types import SLA, Message
from tests.clock import FakeClock
from tests.pool.pool_helpers import take
from tests.recording_backend import recording_backend

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1}'


class Refusing(BaseHTTPRequestHandler):
    """Answers every POST 503, once `release` is set; sets `arrived` when a request is in."""

    arrived = threading.Event()
    release = threading.Event()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        Refusing.arrived.set()
        Refusing.release.wait(10)
        self.send_response(503)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing() -> Iterator[ThreadingHTTPServer]:
    Refusing.arrived.clear()
    Refusing.release.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        Refusing.release.set()
        server.shutdown()
        server.server_close()


def backend(name: str, url: str, clock: FakeClock) -> Backend:
    """A backend with one slot (the queues take its freed slot through the pool's hand-off)."""
    algorithm = algorithms.create("fixed", {"limit": 1}, SLA(ttft_p90=1.0))
    limiter = Limiter(algorithm, clock=clock, floor=1, max_limit=4)
    b = Backend(BackendConfig(url=url, name=name, models=("m",)), limiter, HealthConfig(), clock)
    b.mark_healthy()
    return b


async def test_a_failed_request_is_retried_through_the_queue_behind_those_waiting(
    refusing: ThreadingHTTPServer,
) -> None:
    clock = FakeClock(100.0)
    with recording_backend() as answering:
        a = backend("a", f"http://127.0.0.1:{refusing.server_port}", clock)
        b = backend("b", f"http://127.0.0.1:{answering.server_port}", clock)
        pool = Pool([a, b], clock)
        queues = ModelQueues(pool, parse_config({"backends": [a.url, b.url]}), clock)
        upstream = Upstream(TimeoutConfig(), clock)
        await upstream.start()
        forwarder = Forwarder(queues, upstream, Telemetry(Metrics()), clock, retries=1)
        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)

        try:
            held = take(pool, "m", exclude=["a"])  # b is busy
            assert held is not None and held.backend == "b"
            outcome = Outcome()
            out = Outbound("m", "/v1/chat/completions", BODY, {}, False, Ticket("t"), clock())
            request = asyncio.create_task(forwarder.forward(out, send, outcome))
            await asyncio.to_thread(Refusing.arrived.wait, 10)  # it went to a, the only free one
            waiter = asyncio.create_task(queues.queue("m").admit(Ticket("t")))
            await asyncio.sleep(0)
            assert queues.queue("m").depth == 1
            Refusing.release.set()  # a refuses: its slot goes to the waiter, queued first
            lease = await asyncio.wait_for(waiter, 10)
            assert lease.backend == "a" and not request.done()
            held.release(None)  # b frees: the retry takes it
            await asyncio.wait_for(request, 10)
            assert (outcome.status, outcome.backend, outcome.exchanged) == (200, "b", True)
            assert sent[0]["status"] == 200
            lease.release(None)
            assert (a.limiter.inflight, b.limiter.inflight) == (0, 0)
        finally:
            await upstream.close()


async def test_a_retry_that_only_the_failed_backend_could_take_is_answered_503_no_backend(
    refusing: ThreadingHTTPServer,
) -> None:
    clock = FakeClock(100.0)
    a = backend("a", f"http://127.0.0.1:{refusing.server_port}", clock)
    pool = Pool([a], clock)
    queues = ModelQueues(pool, parse_config({"backends": [a.url]}), clock)
    upstream = Upstream(TimeoutConfig(), clock)
    await upstream.start()
    forwarder = Forwarder(queues, upstream, Telemetry(Metrics()), clock, retries=1)
    Refusing.release.set()

    async def send(message: Message) -> None:
        raise AssertionError("nothing reaches the client before the error")

    try:
        outcome = Outcome()
        out = Outbound("m", "/v1/chat/completions", BODY, {}, False, Ticket("t"), clock())
        with pytest.raises(GatewayError) as err:
            await asyncio.wait_for(forwarder.forward(out, send, outcome), 10)
        assert (err.value.status, err.value.code) == (503, "no_backend")
        assert "answered 503" in err.value.message
        assert outcome.status == 503 and not outcome.exchanged
        assert a.limiter.inflight == 0 and a.in_rotation(clock())  # the last one stays
    finally:
        await upstream.close()
