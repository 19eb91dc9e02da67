"""`create_app(config)`: wiring only. Builds the pool, queues, forwarder, endpoints, routes and loops.

What the server asks besides ASGI (gateway.server.Lifecycle) is wired here too: `begin_shutdown`
(refuse new work, answer the queues 503), `end_requests` (after the grace) and `reload`
(gateway.reload).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

from starlette.types import Receive, Scope, Send

from gateway import limits, routing
from gateway.asgi import respond_error, send_json
from gateway.backends import Backend, Pool
from gateway.batch import api as batch_api
from gateway.batch.service import BatchService
from gateway.config import BackendConfig, GatewayConfig
from gateway.config_source import ConfigSource
from gateway.endpoints import OpenAIEndpoints
from gateway.errors import GatewayError
from gateway.forwarder import Forwarder
from gateway.limiter import Limiter
from gateway.looplag import watch_loop_lag
from gateway.metrics import CONTENT_TYPE, Metrics
from gateway.model_queues import ModelQueues
from gateway.monitor import BackendMonitor, stop_tasks
from gateway.reload import Reloader, ReloadResult
from gateway.router import Route, Router, Surface, get, post
from gateway.supervise import supervise
from gateway.telemetry import Telemetry
from gateway.types import SIGNALS, Clock, Direction
from gateway.upstream import Upstream

if TYPE_CHECKING:
    from gateway.coordination.coordinator import Coordinator

log = logging.getLogger("gateway")


class Gateway:
    """The ASGI application. `Gateway(config)` builds everything; the lifespan starts the loops."""

    def __init__(
        self, config: GatewayConfig, *, clock: Clock | None = None, source: ConfigSource | None = None
    ) -> None:
        self.config = config
        self.clock: Clock = clock or time.monotonic
        self.metrics = Metrics(coordination=config.state.redis_url is not None)
        self.metrics.set_sla(config.sla)
        self.telemetry = Telemetry(self.metrics)
        self.pool = Pool(
            (self.make_backend(bc, config) for bc in config.backends),
            self.clock,
            routing.create(config.routing.strategy, config.routing.max_imbalance),
        )
        self.queues = ModelQueues(self.pool, config, self.clock)
        self.upstream = Upstream(config.timeouts, self.clock)
        self.started_at = self.clock()
        self.stopping = False
        self._started = False
        self._tasks: list[asyncio.Task[None]] = []
        self.coordinator = self._make_coordinator()
        self._watchers: dict[Backend, list[asyncio.Task[None]]] = {}
        self.reloader = Reloader(self, source)
        self.forwarder = Forwarder(
            self.queues, self.upstream, self.telemetry, self.clock, retries=config.retries
        )
        self.endpoints = OpenAIEndpoints(config, self.pool, self.forwarder, self.telemetry, self.clock)
        routes = {
            "/v1/chat/completions": post(self.endpoints),
            "/v1/completions": post(self.endpoints),
            "/v1/embeddings": post(self.endpoints),
            "/v1/models": get(self._models),
            "/health": get(self._health, Surface.BOTH),
            "/metrics": get(self._metrics, Surface.ADMIN),
            "/admin/state": get(self._state, Surface.ADMIN, needs_key=True),
            "/admin/reload": post(self._reload, Surface.ADMIN, needs_key=True),
        }
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
        batch_routes = batch_api.BatchRoutes(self.batches, config.tenant_for_key())
        prefixed = {p: Route(batch_routes, batch_api.METHODS) for p in batch_api.PREFIXES}
        self.router = Router(routes, config.admin, respond_error, prefixed)

    def make_backend(self, bc: BackendConfig, config: GatewayConfig) -> Backend:
        algorithm = limits.create(config.controller.algorithm, config.controller.params, config.sla)
        backend_ref: list[Backend] = []
        limiter = Limiter(
            algorithm,
            clock=self.clock,
            floor=bc.min_concurrency,
            max_limit=bc.max_concurrency,
            window_seconds=config.controller.window_seconds,
            min_samples=config.controller.min_samples,
            on_capacity=lambda: self.queues.wake(backend_ref[0]),
            overdue_after=config.sla.ttft_p90,
        )
        backend = Backend(
            bc, limiter, config.health, self.clock, interactive_horizon=config.batch.interactive_horizon
        )
        backend_ref.append(backend)
        return backend

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
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def start(self) -> None:
        await self.upstream.start()
        monitors = [self._monitor(b) for b in self.pool.backends]
        # One round before serving, so models are known and healthy backends are in rotation.
        await asyncio.gather(*(m.check_once() for m in monitors))
        self._started = True
        for m in monitors:
            self._watch(m, check_first=False)
        self._tasks.append(
            self._supervised("event-loop lag watch", partial(watch_loop_lag, self.metrics.loop_lag.observe))
        )
        if self.coordinator is not None:
            self._tasks.append(self._supervised("coordination", self.coordinator.run))
        if self.batches is not None:
            await self.batches.start()
        for b in self.pool.backends:
            log.info(
                "backend %s %s: %s",
                b.name,
                "up" if b.healthy else "DOWN",
                ", ".join(sorted(b.models)) or b.last_error,
            )

    async def stop(self) -> None:
        if self.batches is not None:
            await self.batches.stop()
        await stop_tasks([*self._tasks, *(t for ts in self._watchers.values() for t in ts)])
        self._tasks.clear()
        self._watchers.clear()
        if self.coordinator is not None:
            await self.coordinator.close()
        await self.upstream.close()

    def watch(self, backend: Backend) -> None:
        """Start health checks and the control loop of a backend added by a reload."""
        if self._started:
            self._watch(self._monitor(backend), check_first=True)

    def unwatch(self, backend: Backend) -> None:
        """Stop them for a backend a reload removed (its running requests finish regardless)."""
        for task in self._watchers.pop(backend, []):
            task.cancel()

    def _monitor(self, backend: Backend) -> BackendMonitor:
        timeout = max(1.0, min(5.0, self.config.health.interval * 2))
        return BackendMonitor(
            backend, self.upstream.session, clock=self.clock, timeout=timeout, on_available=self.queues.wake
        )

    def _watch(self, monitor: BackendMonitor, *, check_first: bool) -> None:
        name = monitor.backend.name
        self._watchers[monitor.backend] = [
            self._supervised(f"health checks of {name}", partial(self._monitor_loop, monitor, check_first)),
            self._supervised(f"control loop of {name}", partial(self._control_loop, monitor.backend)),
        ]

    def _supervised(self, what: str, loop: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """A background loop that is logged and started again if it raises (gateway.supervise)."""
        return asyncio.create_task(supervise(what, loop, clock=self.clock))

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

    async def _monitor_loop(self, monitor: BackendMonitor, check_first: bool) -> None:
        if check_first:
            await monitor.check_once()
        while True:
            await asyncio.sleep(self.config.health.interval)
            await monitor.check_once()

    async def _control_loop(self, backend: Backend) -> None:
        while True:
            await asyncio.sleep(self.config.controller.interval)
            decision = backend.limiter.tick(self.queues.queued_for(backend))
            # Batch lines may wait on a reserve that only time shrinks: look again each tick.
            self.queues.wake(backend)
            if decision.direction is not Direction.HOLD:
                self.metrics.adjustments.labels(backend.name, decision.direction.value, decision.reason).inc()
                log.info(
                    "%s limit %s to %d (%s): %s",
                    backend.name,
                    decision.direction.value,
                    decision.limit,
                    decision.reason,
                    decision.detail,
                )

    # --- plain routes ---

    async def _models(self, scope: Scope, receive: Receive, send: Send) -> None:
        created = int(time.time())
        data = [
            {"id": m, "object": "model", "created": created, "owned_by": "llm-gateway"}
            for m in self.pool.models()
        ]
        await send_json(send, 200, {"object": "list", "data": data})

    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.stopping:
            await send_json(send, 503, {"status": "shutting down", "backends_up": []})
            return
        now = self.clock()
        up = [b.name for b in self.pool.backends if b.in_rotation(now)]
        await send_json(
            send, 200 if up else 503, {"status": "ok" if up else "no healthy backend", "backends_up": up}
        )

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.refresh_gauges()
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

    async def _reload(self, scope: Scope, receive: Receive, send: Send) -> None:
        result = self.reload()
        if not result.ok:
            message = "config reload refused, the running config is kept: " + "; ".join(result.problems)
            await respond_error(send, GatewayError(400, message, "invalid_config"))
            return
        await send_json(send, 200, {"reloaded": True, "changes": list(result.changes)})

    def refresh_gauges(self) -> None:
        """Gauges are set when scraped, keeping the request path free of gauge updates."""
        m = self.metrics
        now = self.clock()
        for b in self.pool.backends:
            lim = b.limiter
            m.inflight.labels(b.name).set(lim.inflight)
            m.batch_inflight.labels(b.name).set(b.background_inflight)
            m.limit.labels(b.name).set(lim.limit)
            m.ceiling.labels(b.name).set(lim.ceiling)
            m.floor.labels(b.name).set(lim.floor)
            m.backend_up.labels(b.name).set(1 if b.in_rotation(now) else 0)
            p90 = lim.p90()
            for signal in SIGNALS:
                if signal in p90:
                    m.latency_p90.labels(b.name, signal).set(p90[signal])
            decision = lim.last_decision
            floor = decision.latency_floor if decision is not None else None
            m.sla_infeasible.labels(b.name).set(0 if floor is None else 1)
            for signal in SIGNALS:
                m.latency_floor.labels(b.name, signal).set(0.0 if floor is None else floor.get(signal, 0.0))
            m.mirror(m.backend_prefix_queries, b.name, b.prefix_queries)
            m.mirror(m.backend_prefix_hits, b.name, b.prefix_hits)
            report = self.pool.strategy.report(b.name, b.cache_epoch)
            if report is not None:
                m.prefix_index_chunks.labels(b.name).set(report.chunks)
                m.mirror(m.prefix_index_queries, b.name, report.queried)
                m.mirror(m.prefix_index_hits, b.name, report.hits)
            s = b.engine_stats
            if s is not None:
                if s.kv_usage is not None:
                    m.kv_usage.labels(b.name).set(s.kv_usage)
                if s.waiting is not None:
                    m.waiting.labels(b.name).set(s.waiting)
        for model, q in self.queues.by_model.items():
            m.queue_depth.labels(model).set(q.depth)
            m.capacity_exhausted.labels(model).set(1 if self.queues.capacity_exhausted(model) else 0)
        if self.batches is not None:
            self.batches.progress.refresh_gauges()
        if self.coordinator is not None and m.coordination_up and m.coordination_replicas:
            m.coordination_up.set(1 if self.coordinator.fallback.shared else 0)
            m.coordination_replicas.set(self.coordinator.fallback.replicas)

    def state(self) -> dict[str, object]:
        now = self.clock()
        return {
            "uptime_seconds": round(now - self.started_at, 3),
            "algorithm": self.config.controller.algorithm,
            "routing": self.config.routing.strategy,
            "sla": self.config.sla.targets(),
            "backends": [{**b.state(now), "prefix_cache": self._prefix_state(b)} for b in self.pool.backends],
            "models": {
                model: {**q.state(), "capacity_exhausted": self.queues.capacity_exhausted(model)}
                for model, q in self.queues.by_model.items()
            },
            "coordination": self.coordinator.state() if self.coordinator is not None else None,
            "batches": None if self.batches is None else self.batches.state(),
        }

    def _prefix_state(self, backend: Backend) -> dict[str, object]:
        """The backend's own prefix-cache hit rate (vLLM's counters), and the index's view of it."""
        out: dict[str, object] = {
            "backend_hit_rate": _ratio(backend.prefix_hits, backend.prefix_queries),
            "backend_queried_tokens": backend.prefix_queries,
        }
        report = self.pool.strategy.report(backend.name, backend.cache_epoch)
        if report is not None:
            out["index_chunks"] = report.chunks
            out["index_queried_chunks"] = report.queried
            out["index_hit_rate"] = _ratio(report.hits, report.queried)
        return out


def _ratio(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole else None


def create_app(
    config: GatewayConfig, *, clock: Clock | None = None, source: ConfigSource | None = None
) -> Gateway:
    return Gateway(config, clock=clock, source=source)
