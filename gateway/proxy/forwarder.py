"""One admitted request's way to a backend: a slot from admission, the exchange, retries elsewhere.

`Forwarder.forward` owns the request from admission to the release of its slot: it waits for a lease
in the model's admission queue, relays the exchange (gateway.proxy.upstream), and, when the backend could
not be reached or refused before answering, counts the failure toward that backend's ejection and
retries on another backend, up to `retries` times. A retry is admitted through the same queue as
any request (`Ticket.exclude` names the backends that failed it), so it keeps to the queue's
priority and fairness instead of taking a slot past those who wait. Each lease is released exactly
once, on every path, with the exchange's latency sample only when the exchange completed.

It does not read the request or answer errors: the endpoint (gateway.proxy.endpoints) does, from the
`Outcome` filled in here and the `GatewayError` raised from here.

An engine that refuses a request as busy (vLLM's 503 past `--max-num-queued-reqs`) is not failing:
its limit is too high. The limiter lowers it at once (`Limiter.engine_busy`), and the request goes
back through the queue, to wait within its budget for a slot here or on another backend: the 503
never reaches a client that can still be served.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gateway.admission import Rejected, Ticket
from gateway.admission.model_queues import ModelQueues
from gateway.metrics.telemetry import Telemetry
from gateway.pool.backends import Backend, Lease
from gateway.proxy.errors import GatewayError
from gateway.proxy.metering import Meter
from gateway.proxy.upstream import (
    Exchange,
    Upstream,
    UpstreamBusy,
    UpstreamRefused,
    UpstreamStopped,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.types import Clock, Send


@dataclass(frozen=True, slots=True)
class Outbound:
    """A read and checked request, as it is to be sent to a backend."""

    model: str
    path: str
    body: bytes
    headers: dict[str, str]
    streaming: bool
    ticket: Ticket
    arrived: float
    """Clock time the request arrived, for its queue wait."""
    meter: Meter | None = None
    """Charges its tokens as they become known (fair queue, quota)."""
    headers_out: tuple[tuple[bytes, bytes], ...] = field(default=())
    """Headers added to the answer (the tenant's rate-limit state)."""


@dataclass(slots=True)
class Outcome:
    """How forwarding went, as far as it got: what the endpoint records and answers."""

    status: int = 500
    backend: str = ""
    first_token_at: float | None = None
    exchanged: bool = False
    """An exchange with a backend ended (else the request was refused, or is still under way)."""
    complete: bool = True
    """False when the response broke off after its headers: the client connection must be aborted."""
    patient: bool = False
    """The request would rather wait than be refused: its wait is not judged against the SLA."""
    tpot: float | None = None
    """Its time per output token, when the exchange completed a stream."""


class Forwarder:
    def __init__(
        self, queues: ModelQueues, upstream: Upstream, telemetry: Telemetry, clock: Clock, *, retries: int
    ) -> None:
        self.retries = retries
        """Other backends a request may be retried on after one could not take it (config.retries)."""
        self.expose_backend = True
        """Answers name their backend in `x-gateway-backend` (config.exposes_backend())."""
        self._queues = queues
        self.queues = queues
        self._upstream = upstream
        self._telemetry = telemetry
        self._clock = clock

    async def forward(self, out: Outbound, send: Send, outcome: Outcome) -> None:
        """Admit, relay and retry `out`, filling `outcome`; raises `GatewayError` for a refusal or a
        failure before anything reached the client."""
        ticket = self._queues.queue(out.model).classify(out.ticket)
        outcome.patient = bool(ticket.patient)
        lease: Lease | None = await self._admit(out, ticket, outcome)
        waited = self._clock() - out.arrived
        if not ticket.background:
            self._telemetry.queued(out.model, waited)
        result: Exchange | None = None
        tried: list[str] = []
        try:
            while result is None:
                assert lease is not None
                outcome.backend = lease.backend
                try:
                    result = await self._exchange(out, lease, send, waited)
                except UpstreamStopped:
                    outcome.status = 503
                    raise shutting_down() from None
                except UpstreamBusy as exc:
                    # Not a failure: the limit let more in than the engine takes. The limit comes
                    # down, and the request waits its turn again within its budget.
                    busy, lease = lease, None
                    busy.target.limiter.engine_busy()
                    busy.release(None)
                    lease = await self._admit(out, ticket, outcome, exc)
                except (UpstreamUnavailable, UpstreamTimeout) as exc:
                    failed, lease = lease, None
                    failed.release(None)
                    tried.append(failed.backend)
                    self._failed(failed.target, str(exc), answered=isinstance(exc, UpstreamRefused))
                    if len(tried) > self.retries:
                        outcome.status = 504 if isinstance(exc, UpstreamTimeout) else 502
                        raise _gave_up(outcome.status, exc) from None
                    lease = await self._admit(out, replace(ticket, exclude=frozenset(tried)), outcome, exc)
            assert lease is not None
            if out.meter is not None:
                out.meter.settle(result.sample)
            outcome.exchanged = True
            outcome.status = result.status
            outcome.first_token_at = result.first_token_at
            outcome.tpot = None if result.sample is None else result.sample.tpot
            outcome.complete = result.complete
            if result.failed:
                self._failed(lease.target, f"request failed with {result.status}", answered=True)
            elif result.status < 500:
                lease.target.record_success()
        finally:
            if lease is not None:
                lease.release(result.sample if result is not None else None)

    async def _admit(
        self, out: Outbound, ticket: Ticket, outcome: Outcome, after: Exception | None = None
    ) -> Lease:
        try:
            return await self._queues.queue(out.model).admit(ticket)
        except Rejected as rej:
            self._telemetry.rejected(out.model, rej.reason)
            outcome.status = rej.status
            message = rej.message if after is None else f"{rej.message} (retrying after: {after})"
            raise GatewayError(
                rej.status, message, rej.reason, retry_after=rej.retry_after, should_retry=rej.should_retry
            ) from None

    async def _exchange(self, out: Outbound, lease: Lease, send: Send, waited: float) -> Exchange:
        extra = [
            (b"x-request-id", out.ticket.request_id.encode() if out.ticket.request_id else b""),
            (b"x-gateway-queue-wait", b"%.4f" % waited),
        ]
        if self.expose_backend:
            extra.append((b"x-gateway-backend", lease.backend.encode()))
        extra.extend(out.headers_out)
        return await self._upstream.exchange(
            lease,
            out.path,
            out.body,
            out.headers,
            send,
            streaming=out.streaming,
            extra_headers=extra,
            on_tokens=out.meter.streamed if out.meter is not None else None,
            most_tokens=out.ticket.most_tokens,
        )

    def _failed(self, backend: Backend, cause: str, *, answered: bool) -> None:
        """Count a failure toward ejecting `backend`; one that answered stays while it is the last
        in rotation for a model (see gateway.pool.backends)."""
        backend.record_failure(
            cause, may_eject=not (answered and self._queues.pool.last_in_rotation(backend))
        )


def _gave_up(status: int, exc: Exception) -> GatewayError:
    return GatewayError(
        status,
        f"upstream failed: {exc}",
        "upstream_timeout" if status == 504 else "bad_gateway",
        retry_after=1.0,
    )


def shutting_down() -> GatewayError:
    return GatewayError(
        503, "the gateway is shutting down", "shutting_down", retry_after=1.0, should_retry=True
    )
