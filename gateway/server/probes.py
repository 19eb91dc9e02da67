"""Answers health probes from a thread of its own, so that a probe measures the process and not the
length of the event loop's current turn.

During a burst of thousands of requests one turn of the event loop runs a callback for every
connection and upstream answer that became ready together: tens of milliseconds, at times over a
hundred (docs/benchmarks.md). A probe on the loop's own listeners waits for the turn in progress,
and an orchestrator with a short probe timeout would take out of service, or restart, a process
that is only busy. With `admin.probe_port` a thread accepts there and answers, one connection at a
time:

    GET /health   what the loop's /health answers (read from the application's state), or 503
                  `event loop stalled` when the loop has not turned for `stall` seconds
    GET /live     200, or 503 when the loop has stalled: liveness, which an outage of every
                  backend must not fail (that is /health's 503, for readiness)
    other paths 404, other methods 405, a malformed head 400; errors in OpenAI's shape.

Why the thread answers within milliseconds while a turn runs: uvloop holds the GIL only inside each
callback, and CPython hands it to a waiting thread within its switch interval (5 ms), so a probe
waits for that, not for the turn. Why a heartbeat: a thread that answers regardless would report a
loop that is blocked for good (a callback that never returns) as healthy; a task stamps the time
every `BEAT` seconds, and both probes fail once the stamp is `stall` seconds old.
Each connection has `TIMEOUT` seconds to send a head of at most `MAX_HEAD` bytes and is closed after
the answer: the port is for the orchestrator, and one slow connection delays the next probe by at
most that.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping

import orjson

from gateway.proxy.errors import GatewayError

log = logging.getLogger("gateway.probe")

BEAT = 0.25
"""Seconds between the loop's stamps."""
STALL = 5.0
"""Seconds without a stamp after which the loop counts as stalled."""
TIMEOUT = 1.0
"""Seconds a connection has to send its request head."""
MAX_HEAD = 8192
ACCEPT_POLL = 0.2
"""Seconds between checks of whether the server was closed, while no probe comes."""

Health = Callable[[], tuple[int, Mapping[str, object]]]
"""The status and body of the loop's /health."""
_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    503: b"Service Unavailable",
}


class ProbeServer:
    """Serves /health and /live on `sock` from a thread; `heartbeat()` runs on the event loop."""

    def __init__(
        self,
        sock: socket.socket,
        health: Health,
        *,
        stall: float = STALL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sock = sock
        self._health = health
        self._stall = stall
        self._clock = clock
        self._beat_at = clock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="probe-server", daemon=True)

    def start(self) -> None:
        self._sock.settimeout(ACCEPT_POLL)
        self._thread.start()

    def close(self) -> None:
        """Stop answering (within ACCEPT_POLL + TIMEOUT); the socket is the caller's."""
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join()

    def beat(self) -> None:
        self._beat_at = self._clock()

    async def heartbeat(self, every: float = BEAT) -> None:
        """Stamp the time every `every` seconds until cancelled: the loop's sign of life."""
        while True:
            self.beat()
            await asyncio.sleep(every)

    def answer(self, head: bytes) -> tuple[int, bytes]:
        """The status and JSON body for one request head."""
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            return _error(400, "malformed request line", "bad_request")
        method, path = parts[0], parts[1].split(b"?", 1)[0]
        if path not in (b"/health", b"/live"):
            return _error(404, f"{path.decode('latin-1')!r} is not served on the probe port", "not_found")
        if method not in (b"GET", b"HEAD"):
            return _error(405, f"{method.decode('latin-1')} is not allowed; use GET", "method_not_allowed")
        stalled = self._clock() - self._beat_at
        if stalled > self._stall:
            return 503, orjson.dumps({"status": "event loop stalled", "stalled_seconds": round(stalled, 1)})
        status, body = self._health() if path == b"/health" else (200, {"status": "ok"})
        return status, orjson.dumps(body)

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError as e:  # out of descriptors, or the socket closed under us
                if self._closed.is_set():
                    return
                log.warning("probe port: accept failed (%s)", e)
                self._closed.wait(ACCEPT_POLL)
                continue
            with conn:
                self._reply(conn)

    def _reply(self, conn: socket.socket) -> None:
        conn.settimeout(TIMEOUT)
        head = b""
        try:
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(1024)
                if not chunk or len(head) + len(chunk) > MAX_HEAD:
                    return
                head += chunk
            status, payload = self.answer(head)
            reason = _REASONS.get(status, b"")
            conn.sendall(
                b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s"
                % (status, reason, len(payload), b"" if head.startswith(b"HEAD ") else payload)
            )
        except OSError:  # the probe went away or was too slow: nothing to answer
            return


def _error(status: int, message: str, code: str) -> tuple[int, bytes]:
    return status, GatewayError(status, message, code).body()
