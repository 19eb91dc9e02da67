"""`create_app(config)`: wiring only. Builds the pool, queues, forwarder, endpoints and routes, and
answers the plain routes; the background loops are gateway.runtime.loops, the gauges
gateway.metrics.live, the admin document gateway.runtime.admin_state.

What the server asks besides ASGI (gateway.server.serve.Lifecycle) is wired here too: `begin_shutdown`
(refuse new work, answer the queues 503), `end_requests` (after the grace) and `reload`
(gateway.runtime.reload).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from gateway import routing
from gateway.admission.model_queues import ModelQueues
from gateway.batch import api as batch_api
from gateway.batch.service import BatchService
from gateway.config import BackendConfig, GatewayConfig
from gateway.config.source import ConfigSource
from gateway.metrics import CONTENT_TYPE, Metrics
from gateway.metrics.telemetry import Telemetry
from gateway.pool.backends import Backend, build_backend
from gateway.pool.pool import Pool
from gateway.proxy.asgi import respond_error, send_json
from gateway.proxy.endpoints import OpenAIEndpoints
from gateway.proxy.errors import GatewayError
from gateway.proxy.forwarder import Forwarder
from gateway.proxy.routes import Route, Router, Surface, get, post
from gateway.proxy.tenants import TenantKeys
from gateway.proxy.upstream import Upstream
from gateway.runtime.admin_state import AdminState
from gateway.runtime.loops import Loops
from gateway.runtime.reload import Reloader, ReloadResult
from gateway.runtime.usage_report import usage_report
from gateway.tenancy.service import Tenancy
from gateway.types import Clock, Receive, Scope, Send

if TYPE_CHECKING:
    from gateway.coordination.coordinator import Coordinator
    from gateway.runtime.sharing import SharedAdmission

log = logging.getLogger("gateway")


class Gateway:
    """The ASGI application. `Gateway(config)` builds everything; the lifespan starts the loops."""

    def __init__(
        self, config: GatewayConfig, *, clock: Clock | None = None, source: ConfigSource | None = None
    ) -> None:
        self.config = config
        self.clock: Clock = clock or time.monotonic
        # Before any part exists: no backend's last change can precede the gateway's start.
        started_at = self.clock()
        self.metrics = Metrics(coordination=config.state.redis_url is not None, clock=self.clock)
        self.telemetry = Telemetry(self.metrics)
        self.pool = Pool(
            (build_backend(bc, config, self.clock) for bc in config.backends),
            self.clock,
            routing.create(config.routing.strategy, config.routing.max_imbalance),
        )
        self.queues = ModelQueues(self.pool, config, self.clock)
        self.upstream = Upstream(config.timeouts, self.clock)
        self.stopping = False
        self.coordinator = self._make_coordinator()
        self.sharing = self._share_slots()
        self.loops = Loops(
            self.pool,
            self.queues,
            self.upstream,
            self.metrics,
            config=lambda: self.config,
            clock=self.clock,
            sharing=self.sharing,
        )
        self.reloader = Reloader(self, source)
        self.forwarder = Forwarder(
            self.queues, self.upstream, self.telemetry, self.clock, retries=config.retries
        )
        self.forwarder.expose_backend = config.exposes_backend()
        self.tenants = TenantKeys(config.tenants)
        self.tenancy = self._make_tenancy()
        self.endpoints = OpenAIEndpoints(
            config, self.pool, self.forwarder, self.telemetry, self.clock, self.tenants, self.tenancy
        )
        self.batches = (
            BatchService(
                config.batch,
                handler=self.endpoints,
                capacity=self.pool.capacity,
                metrics=self.metrics,
                clock=self.clock,
            )
            if config.batch.enabled
            else None
        )
        self.router = self._make_router()
        self.metrics.live.read_from(self)
        self.admin_state = AdminState(
            self.pool,
            self.queues,
            clock=self.clock,
            started_at=started_at,
            coordinator=self.sharing,
            batches=self.batches,
        )

    def _make_router(self) -> Router:
        routes = {
            "/v1/chat/completions": post(self.endpoints),
            "/v1/completions": post(self.endpoints),
            "/v1/embeddings": post(self.endpoints),
            "/v1/models": get(self._models),
            "/health": get(self._health, Surface.BOTH),
            "/metrics": get(self._metrics, Surface.ADMIN),
            "/admin/state": get(self._state, Surface.ADMIN, needs_key=True),
            "/admin/reload": post(self._reload, Surface.ADMIN, needs_key=True),
            "/admin/usage": get(self._usage, Surface.ADMIN, needs_key=True),
        }
        batch_routes = batch_api.BatchRoutes(self.batches, self.tenants)
        prefixed = {p: Route(batch_routes, batch_api.METHODS) for p in batch_api.PREFIXES}
        return Router(routes, self.config.admin, respond_error, prefixed)

    def make_backend(self, bc: BackendConfig, config: GatewayConfig) -> Backend:
        """A backend a reload adds (its freed slots reach the queues through the pool's hand-off)."""
        return build_backend(bc, config, self.clock)

    def _make_coordinator(self) -> Coordinator | None:
        """Shared state through Redis, when configured (the client is imported only then)."""
        state = self.config.state
        if state.redis_url is None:
            return None
        from gateway.coordination.coordinator import Coordinator

        return Coordinator.open(
            state.redis_url,
            [b.name for b in self.pool.backends],
            clock=self.clock,
            namespace=state.namespace,
            lease_seconds=state.lease_seconds,
            timeout=state.timeout,
        )

    def _make_tenancy(self) -> Tenancy:
        """Quotas (in the coordinator's Redis when there is one) and usage."""
        coordinator = self.coordinator
        if coordinator is None:
            return Tenancy(self.config, self.metrics.tenants, clock=self.clock)
        return Tenancy(
            self.config,
            self.metrics.tenants,
            clock=self.clock,
            redis=coordinator.redis,
            replicas=lambda: coordinator.fallback.replicas,
        )

    def _share_slots(self) -> SharedAdmission | None:
        """With a Redis, the pool's slots are leases in it and one controller per backend decides
        (gateway.runtime.sharing)."""
        if self.coordinator is None:
            return None
        from gateway.runtime.sharing import SharedAdmission

        weights = {t.name: t.weight for t in self.config.tenants}
        return SharedAdmission(self.coordinator, self.pool, self.queues, weights, clock=self.clock)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.router(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    # --- lifespan, shutdown, reload ---

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.start()
                except Exception as exc:
                    await self.stop()  # close what did start (upstream sessions, loops)
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def start(self) -> None:
        await self.upstream.start()
        await self.loops.start()
        await self.tenancy.start()
        if self.batches is not None:
            await self.batches.start()
        for b in self.pool.backends:
            if b.healthy:
                log.info("backend %s up: %s", b.name, ", ".join(sorted(b.models)))
            else:
                log.warning("backend %s DOWN: %s", b.name, b.last_error)

    async def stop(self) -> None:
        if self.batches is not None:
            await self.batches.stop()
        await self.tenancy.stop()
        await self.loops.stop()
        if self.sharing is not None:
            await self.sharing.close()  # gives back what ended, then closes the coordinator
        await self.upstream.close()

    def watch(self, backend: Backend) -> None:
        self.loops.watch(backend)

    def unwatch(self, backend: Backend) -> None:
        self.loops.unwatch(backend)

    @property
    def grace(self) -> float:
        return self.config.shutdown_grace

    def begin_shutdown(self) -> None:
        """Refuse new requests and answer every queued one 503 `shutting_down`; running ones go on."""
        if self.stopping:
            return
        self.stopping = True
        if self.batches is not None:
            self.batches.begin_shutdown()  # batch lines stay pending for the next start
        self.endpoints.stop_admitting()
        queued = sum(q.depth for q in self.queues.by_model.values())
        for q in self.queues.by_model.values():
            q.close()
        running = sum(b.limiter.inflight for b in self.pool.backends)
        log.info(
            "shutting down: %d queued requests answered 503, %d running get up to %g s",
            queued,
            running,
            self.grace,
        )

    def end_requests(self) -> None:
        """The grace is over: end every running exchange (streams get an in-band error)."""
        self.upstream.stop()

    def reload(self) -> ReloadResult:
        return self.reloader.reload()

    # --- plain routes ---

    async def _models(self, scope: Scope, receive: Receive, send: Send) -> None:
        created = int(time.time())
        data = [
            {"id": m, "object": "model", "created": created, "owned_by": "llm-gateway"}
            for m in self.pool.models()
        ]
        await send_json(send, 200, {"object": "list", "data": data})

    def health(self) -> tuple[int, dict[str, object]]:
        """What /health answers: 200 while some backend is in rotation, else 503 (and while stopping).
        Also read by the probe port's thread (gateway.server.probes): it only reads."""
        if self.stopping:
            return 503, {"status": "shutting down", "backends_up": []}
        now = self.clock()
        up = [b.name for b in list(self.pool.backends) if b.in_rotation(now)]
        return (200 if up else 503), {"status": "ok" if up else "no healthy backend", "backends_up": up}

    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, *self.health())

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", CONTENT_TYPE.encode())],
            }
        )
        await send({"type": "http.response.body", "body": self.metrics.render()})

    async def _state(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, self.state())

    async def _usage(self, scope: Scope, receive: Receive, send: Send) -> None:
        status, document = await usage_report(self.tenancy.usage, scope.get("query_string", b""))
        await send_json(send, status, document)

    async def _reload(self, scope: Scope, receive: Receive, send: Send) -> None:
        result = self.reload()
        if not result.ok:
            message = "config reload refused, the running config is kept: " + "; ".join(result.problems)
            await respond_error(send, GatewayError(400, message, "invalid_config"), scope)
            return
        await send_json(send, 200, {"reloaded": True, "changes": list(result.changes)})

    def state(self) -> dict[str, object]:
        return self.admin_state.document(self.config)


def create_app(
    config: GatewayConfig, *, clock: Clock | None = None, source: ConfigSource | None = None
) -> Gateway:
    return Gateway(config, clock=clock, source=source)
