"""The OpenAI endpoints: read and check the request, hand it to the forwarder, answer, record.

A raw ASGI handler rather than a framework endpoint: this is the hot path, and it needs the receive
channel for itself to notice a client that goes away while its request waits or streams; it then
cancels the request's task, and the forwarder's `finally` returns the slot. How a request gets a
slot and a backend, and is retried, is gateway.proxy.forwarder's job.

The batch runner calls this same handler in-process for each batch line, with the line's tenant
under the scope key `BACKGROUND_TENANT`: a key no HTTP client can set, since a server builds the
scope from the connection. Such a request waits in the queue's background class and leaves the
client-facing latency histograms alone (its "client" is the runner).
"""

from __future__ import annotations

import asyncio
import functools

from gateway.admission import Ticket
from gateway.config import GatewayConfig
from gateway.metrics.telemetry import UNKNOWN_MODEL, Telemetry
from gateway.pool.pool import Pool
from gateway.proxy.asgi import ABORT, GONE, REQUEST_ID, ClientGone, read_body, respond_error
from gateway.proxy.errors import GatewayError
from gateway.proxy.forwarder import Forwarder, Outbound, Outcome, shutting_down
from gateway.proxy.metering import Meter
from gateway.proxy.quota_errors import over_quota
from gateway.proxy.request import (
    dropped_headers,
    parse_body,
    parse_priority,
    parse_seconds,
    read_head,
)
from gateway.proxy.tenants import TenantKeys
from gateway.proxy.upstream import HOP_BY_HOP
from gateway.tenancy.gate import Hold
from gateway.tenancy.headers import rate_limit_headers
from gateway.tenancy.service import Tenancy
from gateway.types import Clock, Receive, Scope, Send

BACKGROUND_TENANT = "llm_gateway.background_tenant"
"""Scope key marking an in-process batch-line request; its value is the batch's tenant."""

CLIENT_CLOSED = 499
"""Status recorded (never sent) for a request whose client went away."""


class OpenAIEndpoints:
    """ASGI app for POST /v1/chat/completions, /v1/completions and /v1/embeddings."""

    def __init__(
        self,
        config: GatewayConfig,
        pool: Pool,
        forwarder: Forwarder,
        telemetry: Telemetry,
        clock: Clock,
        tenants: TenantKeys,
        tenancy: Tenancy | None = None,
    ) -> None:
        self._tenants = tenants
        self._tenancy = tenancy
        self._pool = pool
        self._forwarder = forwarder
        self._telemetry = telemetry
        self._clock = clock
        self._stopping = False
        self.reconfigure(config)

    def reconfigure(self, config: GatewayConfig) -> None:
        """Take a new config (reload): priorities and limits apply to the next request (keys: the
        shared `TenantKeys`)."""
        self._config = config
        if self._tenancy is not None:
            self._tenancy.reconfigure(config)
        self._priority = {t.name: (t.priority, t.priority_limit) for t in config.tenants}
        self._dropped = dropped_headers(HOP_BY_HOP, config.headers.sensitive, config.headers.passed)

    def stop_admitting(self) -> None:
        """Shutdown began: from now on every request is answered 503 `shutting_down`."""
        self._stopping = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._handle(scope, receive, send)
        except GatewayError as err:
            await respond_error(send, err, scope)
        except ClientGone:
            pass

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        arrived = self._clock()
        head = read_head(scope["headers"], self._dropped, scope.get("client"))
        scope[REQUEST_ID] = head.request_id
        limit = self._config.max_body_bytes
        if head.content_length > limit:
            raise GatewayError(
                413,
                f"request body of {head.content_length} bytes is over the limit of {limit} bytes",
                "request_too_large",
            )
        body = await read_body(receive, limit)
        background: str | None = scope.get(BACKGROUND_TENANT)
        tenant = self._tenants.tenant_of(head.auth) if background is None else background
        parsed = parse_body(body, head.session, tenant)
        model, streaming, route = parsed.model, parsed.streaming, parsed.route
        self._require_known(model)
        default, maximum = self._priority.get(tenant, (0, 0))
        ticket = Ticket(
            tenant=tenant,
            priority=parse_priority(head.priority, default, maximum),
            timeout=parse_seconds(head.timeout),
            request_id=head.request_id,
            route=route,
            background=background is not None,
            arrived=arrived,
            prompt_tokens=parsed.prompt_tokens,
            most_tokens=parsed.most_tokens,
        )
        if self._stopping:
            self._telemetry.rejected(model, "shutting_down")
            raise shutting_down()
        hold = await self._admit_quota(ticket, model)
        meter = Meter(ticket, self._forwarder.queues.queue(model))
        headers_out: tuple[tuple[bytes, bytes], ...] = ()
        if hold is not None and self._tenancy is not None:
            meter.gate, meter.hold = self._tenancy.gate, hold
            headers_out = rate_limit_headers(hold.verdict)
        path = scope["path"]
        out = Outbound(model, path, body, head.forward, streaming, ticket, arrived, meter, headers_out)
        try:
            await self._forward(scope, receive, send, out)
        finally:
            if hold is not None and self._tenancy is not None:
                self._tenancy.gate.finish(hold)

    def _require_known(self, model: str) -> None:
        """Raise 404 `model_not_found` for a model no backend serves, or 503 `no_backend` while
        some backend has never answered (so "no such model" may not be true yet)."""
        pool = self._pool
        if pool.known(model):
            return
        if pool.undiscovered():
            # The name is the client's: it is counted under one label, not a series of its own.
            self._telemetry.rejected(UNKNOWN_MODEL, "no_backend")
            raise GatewayError(
                503,
                f"no healthy backend is known to serve `{model}` yet: "
                f"{', '.join(b.name for b in pool.undiscovered())} not reachable",
                "no_backend",
                retry_after=self._config.health.interval * 2,
            )
        served = ", ".join(pool.models()) or "none in rotation now"
        raise GatewayError(
            404,
            f"The model `{model}` does not exist. Served models: {served}.",
            "model_not_found",
            param="model",
        )

    async def _admit_quota(self, ticket: Ticket, model: str) -> Hold | None:
        """The tenant's quotas take this request, or it is refused 429 `rate_limit_exceeded`."""
        if self._tenancy is None:
            return None
        hold = await self._tenancy.gate.admit(
            ticket.tenant, ticket.prompt_tokens, enforce=not ticket.background
        )
        if hold is not None and not hold.verdict.allowed:
            self._telemetry.rejected(model, "rate_limit_exceeded")
            raise over_quota(ticket.tenant, hold.verdict)
        return hold

    async def _forward(self, scope: Scope, receive: Receive, send: Send, out: Outbound) -> None:
        """Forward while watching for the client to go away; record how it ended."""
        task = asyncio.current_task()
        assert task is not None
        gone = asyncio.Event()
        extensions = scope.get("extensions")
        watcher = None
        if extensions is not None and ABORT in extensions:  # our server says when the client leaves
            extensions[GONE] = functools.partial(_client_left, task, gone)
        else:
            watcher = asyncio.create_task(_watch_disconnect(receive, task, gone))
        outcome = Outcome()
        try:
            await self._forwarder.forward(out, send, outcome)
            if not outcome.complete:
                abort_connection(scope)
        except asyncio.CancelledError:
            if not gone.is_set():
                raise
            task.uncancel()
            if not outcome.exchanged:
                outcome.status = CLIENT_CLOSED
        finally:
            if watcher is None:
                extensions.pop(GONE, None)  # type: ignore[union-attr]
            else:
                watcher.cancel()
            self._record_usage(out, outcome)
            self._telemetry.finished(
                out.model,
                outcome.backend,
                outcome.status,
                out.arrived,
                self._clock(),
                outcome.first_token_at,
                client_facing=not out.ticket.background,
            )
            if not (out.ticket.background or outcome.patient or outcome.status == CLIENT_CLOSED):
                self._telemetry.metrics.client_sla.judge(
                    out.model,
                    self._config.sla_for(out.model, out.ticket.tenant),
                    model_sla=self._config.sla_for(out.model),
                    status=outcome.status,
                    refused=not outcome.exchanged and outcome.status in (429, 503),
                    arrived=out.arrived,
                    first_token_at=outcome.first_token_at,
                    tpot=outcome.tpot,
                )

    def _record_usage(self, out: Outbound, outcome: Outcome) -> None:
        """Usage of a request a backend answered, or that streamed some output before it ended."""
        meter = out.meter
        if self._tenancy is None or meter is None or not outcome.backend:
            return
        if (outcome.exchanged and outcome.status == 200) or meter.output:
            self._tenancy.usage.record(out.ticket.tenant, out.model, meter.prompt, meter.output)


def abort_connection(scope: Scope) -> None:
    """Abort the client connection of a response that cannot be completed (see gateway.server.listener).

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
            _client_left(task, gone)
            return


def _client_left(task: asyncio.Task[None], gone: asyncio.Event) -> None:
    gone.set()
    task.cancel()
