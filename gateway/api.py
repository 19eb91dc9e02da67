"""The OpenAI endpoints: read and check the request, wait for a slot, forward, account.

A raw ASGI handler rather than a framework endpoint: this is the hot path, and it needs the receive
channel for itself to notice a client that goes away while its request waits or streams.
Every lease taken here is released exactly once, in `finally`.

The batch runner calls this same handler in-process for each batch line, with the line's tenant
under the scope key `BACKGROUND_TENANT`: a key no HTTP client can set, since a server builds the
scope from the connection. Such a request waits in the queue's background class and leaves the
client-facing latency histograms alone (its "client" is the runner).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import cast

import orjson
from starlette.types import Receive, Scope, Send

from gateway.admission import Rejected, Ticket
from gateway.backends import Backend, Lease
from gateway.config import GatewayConfig
from gateway.dispatch import Dispatch
from gateway.errors import GatewayError
from gateway.listener import ABORT
from gateway.proxy import (
    HOP_BY_HOP,
    Exchange,
    Upstream,
    UpstreamRefused,
    UpstreamStopped,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.request import dropped_headers, parse_priority, parse_request, parse_seconds, read_head
from gateway.telemetry import UNKNOWN_MODEL, Telemetry
from gateway.tenants import tenant_of
from gateway.types import Clock

BACKGROUND_TENANT = "llm_gateway.background_tenant"
"""Scope key marking an in-process batch-line request; its value is the batch's tenant."""

CLIENT_CLOSED = 499
"""Status recorded (never sent) for a request whose client went away."""


class ClientGone(Exception):
    """The client disconnected before its request was read."""


class OpenAIProxy:
    """ASGI app for POST /v1/chat/completions, /v1/completions and /v1/embeddings."""

    def __init__(
        self,
        config: GatewayConfig,
        dispatch: Dispatch,
        upstream: Upstream,
        telemetry: Telemetry,
        clock: Clock,
    ) -> None:
        self._dispatch = dispatch
        self._upstream = upstream
        self._telemetry = telemetry
        self._clock = clock
        self._stopping = False
        self.reconfigure(config)

    def reconfigure(self, config: GatewayConfig) -> None:
        """Take a new config (reload): tenants, keys and limits apply to the next request."""
        self._config = config
        self._tenants = config.tenant_for_key()
        self._priority = {t.name: (t.priority, t.priority_limit) for t in config.tenants}
        self._dropped = dropped_headers(HOP_BY_HOP, config.headers.sensitive, config.headers.passed)

    def stop_admitting(self) -> None:
        """Shutdown began: from now on every request is answered 503 `shutting_down`."""
        self._stopping = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._handle(scope, receive, send)
        except GatewayError as err:
            await respond_error(send, err)
        except ClientGone:
            pass

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        arrived = self._clock()
        head = read_head(scope["headers"], self._dropped)
        limit = self._config.max_body_bytes
        if head.content_length > limit:
            raise GatewayError(
                413,
                f"request body of {head.content_length} bytes is over the limit of {limit} bytes",
                "request_too_large",
            )
        body = await read_body(receive, limit)
        background: str | None = scope.get(BACKGROUND_TENANT)
        tenant = tenant_of(self._tenants, head.auth) if background is None else background
        model, streaming, route = parse_request(body, head.session)
        pool = self._dispatch.pool
        if not pool.known(model):
            if pool.undiscovered():
                # Some backend never answered, so "no such model" may not be true yet. The name is
                # the client's: it is counted under one label, not a series of its own.
                self._telemetry.rejected(UNKNOWN_MODEL, "no_backend")
                raise GatewayError(
                    503,
                    f"no healthy backend is known to serve `{model}` yet: "
                    f"{', '.join(b.name for b in pool.undiscovered())} not reachable",
                    "no_backend",
                    retry_after=self._config.health.interval * 2,
                )
            raise GatewayError(404, f"The model `{model}` does not exist.", "model_not_found", param="model")
        default, maximum = self._priority.get(tenant, (0, 0))
        ticket = Ticket(
            tenant=tenant,
            priority=parse_priority(head.priority, default, maximum),
            timeout=parse_seconds(head.timeout),
            request_id=head.request_id,
            route=route,
            background=background is not None,
        )
        if self._stopping:
            self._telemetry.rejected(model, "shutting_down")
            raise shutting_down()
        await self._admit_and_forward(
            scope, receive, send, model, streaming, body, head.forward, ticket, arrived
        )

    async def _admit_and_forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        model: str,
        streaming: bool,
        body: bytes,
        forward: dict[str, str],
        ticket: Ticket,
        arrived: float,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        gone = asyncio.Event()
        watcher = asyncio.create_task(_watch_disconnect(receive, task, gone))
        telemetry = self._telemetry
        lease: Lease | None = None
        result: Exchange | None = None
        status = 500
        backend_name = ""
        try:
            try:
                # The pool is the queue's dispatcher, so what it hands out is the pool's Lease.
                lease = cast(Lease, await self._dispatch.queue(model).admit(ticket))
            except Rejected as rej:
                telemetry.rejected(model, rej.reason)
                status = rej.status
                raise GatewayError(
                    rej.status,
                    rej.message,
                    rej.reason,
                    retry_after=rej.retry_after,
                    should_retry=rej.should_retry,
                ) from None
            waited = self._clock() - arrived
            if not ticket.background:
                telemetry.queued(model, waited)
            tried: list[Backend] = []
            while lease is not None:
                backend_name = lease.backend
                extra = [
                    (b"x-gateway-backend", backend_name.encode()),
                    (b"x-request-id", ticket.request_id.encode() if ticket.request_id else b""),
                    (b"x-gateway-queue-wait", b"%.4f" % waited),
                ]
                try:
                    result = await self._upstream.exchange(
                        lease, scope["path"], body, forward, send, streaming=streaming, extra_headers=extra
                    )
                    break
                except UpstreamStopped:
                    status = 503
                    raise shutting_down() from None
                except (UpstreamUnavailable, UpstreamTimeout) as exc:
                    failed, lease = lease, None
                    failed.release(None)
                    tried.append(failed.target)
                    self._failed(failed.target, str(exc), answered=isinstance(exc, UpstreamRefused))
                    if len(tried) > self._config.retries:
                        status = 504 if isinstance(exc, UpstreamTimeout) else 502
                        raise GatewayError(
                            status,
                            f"upstream failed: {exc}",
                            "upstream_timeout" if status == 504 else "bad_gateway",
                            retry_after=1.0,
                        ) from None
                    lease = self._dispatch.pool.try_acquire(
                        model, ticket.route, exclude=tried, background=ticket.background
                    )
                    if lease is None:
                        status = 503
                        raise GatewayError(
                            503,
                            f"no other backend could take the request after: {exc}",
                            "no_backend",
                            retry_after=1.0,
                        ) from None
            assert result is not None and lease is not None
            status = result.status
            if not result.complete:
                abort_connection(scope)
            if result.failed:
                self._failed(lease.target, f"request failed with {status}", answered=True)
            elif status < 500:
                lease.target.record_success()
        except asyncio.CancelledError:
            if not gone.is_set():
                raise
            task.uncancel()
            if result is None:
                status = CLIENT_CLOSED
        finally:
            watcher.cancel()
            if lease is not None:
                lease.release(result.sample if result is not None else None)
            telemetry.finished(
                model,
                backend_name,
                status,
                arrived,
                self._clock(),
                result.first_token_at if result is not None else None,
                client_facing=not ticket.background,
            )

    def _failed(self, backend: Backend, cause: str, *, answered: bool) -> None:
        """Count a failure toward ejecting `backend`; one that answered stays while it is the last
        in rotation for a model (see gateway.backends)."""
        backend.record_failure(
            cause, may_eject=not (answered and self._dispatch.pool.last_in_rotation(backend))
        )


def shutting_down() -> GatewayError:
    return GatewayError(
        503, "the gateway is shutting down", "shutting_down", retry_after=1.0, should_retry=True
    )


def abort_connection(scope: Scope) -> None:
    """Abort the client connection of a response that cannot be completed (see gateway.listener).

    Under a server without the extension, returning without completing the response closes it too.
    """
    abort = scope.get("extensions", {}).get(ABORT)
    if abort is not None:
        abort()


async def _watch_disconnect(receive: Receive, task: asyncio.Task[None], gone: asyncio.Event) -> None:
    """Cancel the request's task when its client disconnects (uvicorn reports http.disconnect)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            task.cancel()
            return


async def read_body(receive: Receive, limit: int) -> bytes:
    """The request body, refusing with 413 as soon as it passes `limit` (reading no more)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise GatewayError(413, f"request body is over the limit of {limit} bytes", "request_too_large")
        parts.append(chunk)
        if not message.get("more_body"):
            return parts[0] if len(parts) == 1 else b"".join(parts)


async def respond_error(send: Send, err: GatewayError) -> None:
    with contextlib.suppress(RuntimeError):  # a response already started cannot be replaced
        await send({"type": "http.response.start", "status": err.status, "headers": err.headers()})
        await send({"type": "http.response.body", "body": err.body()})


async def send_json(send: Send, status: int, payload: object) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": orjson.dumps(payload)})
