"""One exchange with one backend: send the body, stream the answer back chunk by chunk, time it.

Bytes are forwarded as they arrive, never re-encoded. The only per-chunk work is a scan for SSE event
boundaries (token timing) and a timer reschedule (idle timeout). The connection to the backend is
closed, not returned to the pool, when the exchange is abandoned early: that is what makes vLLM abort
the sequence and free its KV blocks.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp
import orjson
from starlette.types import Send

from gateway.backends import Lease
from gateway.config import TimeoutConfig
from gateway.sse import StreamStats, body_usage
from gateway.types import Clock, Sample

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"authorization",
        b"x-request-id",
        b"x-gateway-backend",
    }
)
"""Request headers never forwarded upstream (hop-by-hop, and those the gateway sets itself)."""

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


class Upstream:
    """The shared HTTP client. aiohttp keeps a keep-alive pool per backend host."""

    def __init__(self, timeouts: TimeoutConfig, clock: Clock) -> None:
        self._timeouts = timeouts
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, enable_cleanup_closed=True)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeouts.connect)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

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
    ) -> Exchange:
        clock = self._clock
        loop = asyncio.get_running_loop()
        url = lease.target.url + path
        if lease.target.config.api_key:
            headers = {**headers, "Authorization": f"Bearer {lease.target.config.api_key}"}
        dispatched = clock()
        progress = StreamStats() if streaming else None
        if progress is not None:
            lease.slot.streaming(dispatched, progress)
        started = False
        first_token_at: float | None = None
        try:
            async with asyncio.timeout(self._timeouts.first_byte) as deadline:
                try:
                    resp = await self.session.post(url, data=body, headers=headers)
                except (aiohttp.ClientConnectionError, aiohttp.ClientOSError) as exc:
                    raise UpstreamUnavailable(f"{lease.backend}: {exc}") from exc
                try:
                    if resp.status == 503:
                        raise UpstreamUnavailable(f"{lease.backend}: answered 503")
                    out_headers = [
                        (k.lower(), v) for k, v in resp.raw_headers if k.lower() not in _RESPONSE_DROP
                    ]
                    out_headers.extend(extra_headers)
                    await send({"type": "http.response.start", "status": resp.status, "headers": out_headers})
                    started = True
                    stats = progress if resp.status == 200 else None
                    tail = b""
                    idle = self._timeouts.idle
                    async for chunk in resp.content.iter_any():
                        now = clock()
                        if stats is not None:
                            stats.feed(chunk, now)
                            if first_token_at is None and stats.first_at is not None:
                                first_token_at = stats.first_at
                                lease.slot.first_token(dispatched, first_token_at - dispatched)
                        else:
                            tail = (tail + chunk)[-512:]
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                        deadline.reschedule(loop.time() + idle)
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except BaseException:
                    # Abandoned early: close the connection so the backend aborts the request.
                    resp.close()
                    raise
                else:
                    resp.release()
        except TimeoutError:
            if not started:
                raise UpstreamTimeout(lease.backend, self._timeouts.first_byte) from None
            await self._abort_stream(send, streaming, "the backend stopped sending (idle timeout)")
            return Exchange(504, None, first_token_at, True, True)
        except aiohttp.ClientError as exc:  # payload errors, a dropped connection mid-response
            if not started:
                raise UpstreamUnavailable(f"{lease.backend}: {exc}") from exc
            await self._abort_stream(send, streaming, f"the backend connection broke: {exc!r}")
            return Exchange(502, None, first_token_at, True, True)

        end = clock()
        status = resp.status
        if status != 200:
            return Exchange(status, None, None, status >= 500, True)
        if stats is not None:
            if stats.error:
                return Exchange(status, None, first_token_at, True, True)
            sample = Sample(
                dispatched_at=dispatched,
                e2e=end - dispatched,
                ttft=None if stats.first_at is None else stats.first_at - dispatched,
                tpot=stats.tpot(),
                output_tokens=stats.tokens,
                prompt_tokens=stats.prompt_tokens,
            )
        else:
            prompt_tokens, output_tokens = body_usage(tail)
            sample = Sample(
                dispatched_at=dispatched,
                e2e=end - dispatched,
                output_tokens=output_tokens,
                prompt_tokens=prompt_tokens,
            )
        return Exchange(status, sample, first_token_at, False, True)

    @staticmethod
    async def _abort_stream(send: Send, streaming: bool, message: str) -> None:
        """Headers are out, so the status cannot change: say so in-band the way vLLM does."""
        if streaming:
            event = orjson.dumps(
                {"error": {"message": message, "type": "api_error", "param": None, "code": 502}}
            )
            await send({"type": "http.response.body", "body": b"data: " + event + b"\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class UpstreamTimeout(Exception):
    def __init__(self, backend: str, seconds: float) -> None:
        super().__init__(f"{backend}: no response within {seconds:g} s")
        self.backend = backend
