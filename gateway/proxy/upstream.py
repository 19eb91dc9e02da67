"""One exchange with one backend: send the body, stream the answer back chunk by chunk, time it.

Bytes are forwarded as they arrive, never re-encoded. The only per-chunk work is a scan for SSE event
boundaries (token timing) and noting when the chunk came (idle timeout). The connection to the backend is
closed, not returned to the pool, when the exchange is abandoned early: that is what makes vLLM abort
the sequence and free its KV blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import orjson

from gateway.config import TimeoutConfig
from gateway.pool.backends import Lease
from gateway.proxy.deadlines import Deadlines
from gateway.proxy.h1client import ConnectFailed, H1Client, Response, ResponseBroken
from gateway.proxy.sse import StreamStats, body_usage
from gateway.types import Clock, Sample, Send

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"authorization",
        b"x-request-id",
        b"x-gateway-backend",
        b"x-forwarded-for",
        b"x-priority",
        b"x-queue-timeout",
        b"x-session-id",
    }
)
"""Request headers never forwarded upstream: hop-by-hop (RFC 9110 7.6.1, and those `Connection`
names), those the gateway sets itself, and its own controls (priority, queue timeout, session)."""

_RESPONSE_DROP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"date",
        b"server",
        b"x-request-id",
        b"x-gateway-backend",
    }
)


class UpstreamUnavailable(Exception):
    """The backend could not be reached, or refused before sending anything. Safe to retry."""


class UpstreamRefused(UpstreamUnavailable):
    """The backend answered 503 before sending anything: an answer, and safe to retry."""


class UpstreamBusy(UpstreamRefused):
    """The engine refused the request as too busy to queue it (vLLM's `--max-num-queued-reqs` or
    `--max-num-queued-tokens`): nothing is wrong with it, it has more requests than it takes."""


BUSY_MARKERS = (b"engine is currently busy", b"prefill token backlog limit")
"""What vLLM (0.32) says in the body of those 503s."""
_BUSY_BODY_BYTES = 4096


class UpstreamTimeout(Exception):
    def __init__(self, backend: str, seconds: float) -> None:
        super().__init__(f"{backend}: no response within {seconds:g} s")
        self.backend = backend


class UpstreamStopped(Exception):
    """The gateway is shutting down: the exchange was ended before anything reached the client."""


@dataclass(slots=True)
class Exchange:
    status: int
    sample: Sample | None
    """A latency sample, when the exchange completed successfully."""
    first_token_at: float | None
    failed: bool
    """The backend misbehaved (5xx, mid-stream error, timeout): counts toward ejection."""
    started: bool
    """Whether anything was sent to the client."""
    complete: bool = True
    """False when the response broke off after its headers and could not be ended in-band: the
    client connection must be aborted, so the client sees a failed transfer, not a short success."""


@dataclass(slots=True)
class _Relay:
    """What one exchange has sent to the client so far."""

    status: int = 0
    """The status sent to the client; 0 until the headers are out."""
    first_token_at: float | None = None
    tail: bytes = b""
    """The last bytes of a non-streaming body, where `usage` is."""
    on_tokens: Callable[[int], None] | None = None


class Upstream:
    """The exchanges with backends (gateway.proxy.h1client, kept-alive connections per backend), and
    the aiohttp session the health, model and metrics probes share.

    Each exchange runs under one deadline (gateway.proxy.deadlines): `first_byte` until the response
    starts, then `idle` from each chunk. `stop()` (shutdown, after the grace) fires every running
    deadline now, so each exchange ends the way a timeout ends it, but says that the gateway is
    shutting down.
    """

    def __init__(self, timeouts: TimeoutConfig, clock: Clock) -> None:
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._client = H1Client(timeouts.connect)
        self._deadlines = Deadlines(min(timeouts.first_byte, timeouts.idle))
        self._stopping = False
        self.timeouts = timeouts

    @property
    def timeouts(self) -> TimeoutConfig:
        return self._timeouts

    @timeouts.setter
    def timeouts(self, timeouts: TimeoutConfig) -> None:
        """Applies to the next exchange (the config was reloaded)."""
        self._timeouts = timeouts
        self._client_timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect)
        self._client.connect_timeout = timeouts.connect
        self._deadlines.fit(min(timeouts.first_byte, timeouts.idle))

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, enable_cleanup_closed=True)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._client_timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )

    async def close(self) -> None:
        self._client.close()
        self._deadlines.close()
        if self._session is not None:
            await self._session.close()

    def stop(self) -> None:
        """End every running exchange now, and refuse new ones (the shutdown grace is over)."""
        self._stopping = True
        self._deadlines.fire_all()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Upstream.start() was not awaited")
        return self._session

    async def exchange(
        self,
        lease: Lease,
        path: str,
        body: bytes,
        headers: dict[str, str],
        send: Send,
        *,
        streaming: bool,
        extra_headers: list[tuple[bytes, bytes]],
        on_tokens: Callable[[int], None] | None = None,
        most_tokens: int | None = None,
    ) -> Exchange:
        """Relay one exchange; `on_tokens` hears the count of output tokens streamed so far;
        `most_tokens`: the tokens one of its sequences holds at most, if the request says."""
        if self._stopping:
            raise UpstreamStopped(lease.backend)
        if lease.target.config.api_key:
            headers = {**headers, "Authorization": f"Bearer {lease.target.config.api_key}"}
        dispatched = self._clock()
        progress = StreamStats() if streaming else None
        lease.slot.sent(dispatched, progress, most_tokens)
        relay = _Relay(on_tokens=on_tokens)
        try:
            async with asyncio.timeout(None) as deadline:
                self._deadlines.set(deadline, asyncio.get_running_loop().time() + self._timeouts.first_byte)
                try:
                    try:
                        resp = await self._client.post(lease.target.url, path, body, headers)
                    except ConnectFailed as exc:
                        raise UpstreamUnavailable(f"{lease.backend}: {exc}") from exc
                    try:
                        await self._relay(
                            resp, send, deadline, lease, dispatched, progress, extra_headers, relay
                        )
                    except BaseException:
                        # Abandoned early: close the connection so the backend aborts the request.
                        resp.close()
                        raise
                    resp.release()
                finally:
                    self._deadlines.discard(deadline)
        except TimeoutError:
            if self._stopping:
                if not relay.status:
                    raise UpstreamStopped(lease.backend) from None
                return await self._broken(send, streaming, relay, 503, "the gateway is shutting down", False)
            if not relay.status:
                raise UpstreamTimeout(lease.backend, self._timeouts.first_byte) from None
            return await self._broken(
                send, streaming, relay, 504, "the backend stopped sending (idle timeout)"
            )
        except ResponseBroken as exc:  # a dropped connection or a bad body mid-response
            if not relay.status:
                raise UpstreamUnavailable(f"{lease.backend}: {exc}") from exc
            return await self._broken(send, streaming, relay, 502, f"the backend connection broke: {exc!r}")
        return self._finished(relay, progress, dispatched)

    async def _relay(
        self,
        resp: Response,
        send: Send,
        deadline: asyncio.Timeout,
        lease: Lease,
        dispatched: float,
        progress: StreamStats | None,
        extra_headers: list[tuple[bytes, bytes]],
        relay: _Relay,
    ) -> None:
        """Send the response on as it arrives. The only per-chunk work: token timing and the timer."""
        if resp.status == 503:
            head = await resp.read(_BUSY_BODY_BYTES)
            if any(marker in head for marker in BUSY_MARKERS):
                raise UpstreamBusy(f"{lease.backend}: the engine is busy (503)")
            raise UpstreamRefused(f"{lease.backend}: answered 503")
        out_headers = [(k, v) for k, v in resp.raw_headers if k not in _RESPONSE_DROP]
        out_headers.extend(extra_headers)
        await send({"type": "http.response.start", "status": resp.status, "headers": out_headers})
        relay.status = resp.status
        stats = progress if resp.status == 200 else None
        clock = self._clock
        loop_time = asyncio.get_running_loop().time
        idle = self._timeouts.idle
        deadlines = self._deadlines
        on_tokens = relay.on_tokens if stats is not None else None
        more = True
        async for chunk in resp.chunks():
            if stats is not None:
                stats.feed(chunk, clock())
                if relay.first_token_at is None and stats.first_at is not None:
                    relay.first_token_at = stats.first_at
                    lease.slot.first_token(dispatched, stats.first_at - dispatched)
                if on_tokens is not None:
                    on_tokens(stats.tokens)
            else:
                relay.tail = (relay.tail + chunk)[-512:]
            more = not resp.at_eof()  # the answer's last chunk ends the response: no empty send after
            await send({"type": "http.response.body", "body": chunk, "more_body": more})
            if more:
                deadlines.set(deadline, loop_time() + idle)
        if more:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _finished(self, relay: _Relay, stats: StreamStats | None, dispatched: float) -> Exchange:
        end = self._clock()
        status = relay.status
        if status != 200:
            return Exchange(status, None, None, status >= 500, True)
        if stats is not None:
            if stats.error:
                return Exchange(status, None, relay.first_token_at, True, True)
            sample = Sample(
                dispatched_at=dispatched,
                e2e=end - dispatched,
                ttft=None if stats.first_at is None else stats.first_at - dispatched,
                tpot=stats.tpot(),
                output_tokens=stats.tokens,
                prompt_tokens=stats.prompt_tokens,
            )
        else:
            prompt_tokens, output_tokens = body_usage(relay.tail)
            sample = Sample(
                dispatched_at=dispatched,
                e2e=end - dispatched,
                output_tokens=output_tokens,
                prompt_tokens=prompt_tokens,
            )
        return Exchange(status, sample, relay.first_token_at, False, True)

    @staticmethod
    async def _broken(
        send: Send, streaming: bool, relay: _Relay, status: int, message: str, failed: bool = True
    ) -> Exchange:
        """The response broke off after its headers went out, so its status cannot change.

        An event stream says so in-band, as vLLM does: an event with an `error` object whose code is
        the status the gateway records. Any other body cannot carry an error: it is left incomplete.
        """
        if not (streaming and relay.status == 200):
            return Exchange(status, None, relay.first_token_at, failed, True, complete=False)
        kind = "service_unavailable_error" if status == 503 else "api_error"
        event = orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}})
        await send({"type": "http.response.body", "body": b"data: " + event + b"\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return Exchange(status, None, relay.first_token_at, failed, True)
