"""Config reload (SIGHUP or POST /admin/reload): the running gateway takes a new config in place.

All or nothing. The file is read and validated first; an invalid one is refused with one log line
listing its problems, and nothing changes. A valid one is applied in one synchronous step (no await
in between), so no request ever sees half of it:
- Backends are matched by name and URL. One that stays keeps its limiter, so the limit it learned,
  its latency window and its KV estimates survive; its bounds (`min_concurrency`,
  `max_concurrency`, the limit clamped into them), key and pinned models are updated. Its
  algorithm is rebuilt only if `controller`, `sla` or a tenant's `sla` changed, starting from the
  learned limit.
- A new backend enters the pool out of rotation and joins when its first health check passes.
- A removed backend leaves the pool at once: nothing new is sent to it, requests running there
  finish (each holds its backend), its checks stop, its gauges go (they are read from the pool).
  Queued requests for a model that no backend is configured to serve any more are answered 503
  `no_backend`.
- SLA, tenants and keys, queue bounds and weights, timeouts, health, retries, the body limit, the
  shutdown grace and the admin key apply to the next request, check or shutdown. So does routing:
  a new strategy or imbalance bound starts a new one (the prefix index starts empty), a new
  lookahead applies to the next free slot; a removed backend's prefix index is forgotten.
- The listeners (`listen.*`, `admin.host`, `admin.port`) and the shared state (`state.*`) are set
  up at start; a change to them is logged and ignored until a restart. So are
  `controller.window_seconds` and `min_samples` of the backends that stay (they size a window that
  holds what was learned).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Protocol

from gateway import routing
from gateway.admission.model_queues import ModelQueues
from gateway.config import BackendConfig, ConfigError, GatewayConfig
from gateway.config.source import ConfigSource
from gateway.control import algorithms
from gateway.pool.backends import Backend
from gateway.pool.pool import Pool
from gateway.proxy.endpoints import OpenAIEndpoints
from gateway.proxy.forwarder import Forwarder
from gateway.proxy.routes import Router
from gateway.proxy.tenants import TenantKeys
from gateway.proxy.upstream import Upstream

log = logging.getLogger("gateway.runtime.reload")


class Gateway(Protocol):
    """What a reload changes in the running gateway (gateway.app.Gateway)."""

    config: GatewayConfig
    pool: Pool
    queues: ModelQueues
    upstream: Upstream
    forwarder: Forwarder
    endpoints: OpenAIEndpoints
    router: Router
    tenants: TenantKeys

    def make_backend(self, bc: BackendConfig, config: GatewayConfig) -> Backend: ...

    def watch(self, backend: Backend) -> None: ...

    def unwatch(self, backend: Backend) -> None: ...


_APPLIED = (
    "sla",
    "controller",
    "queue",
    "timeouts",
    "health",
    "tenants",
    "max_body_bytes",
    "retries",
    "shutdown_grace",
    "routing",
    "fairness",
)


@dataclass(frozen=True, slots=True)
class ReloadResult:
    ok: bool
    changes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()


class Reloader:
    def __init__(self, gateway: Gateway, source: ConfigSource | None) -> None:
        self._gateway = gateway
        self._source = source

    def reload(self) -> ReloadResult:
        if self._source is None:
            problems: tuple[str, ...] = ("the gateway was not started from a config source",)
        else:
            try:
                config = self._source.load()
            except ConfigError as exc:
                problems = tuple(exc.problems)
            else:
                changes = tuple(apply(self._gateway, config))
                log.info("config reloaded: %s", "; ".join(changes) or "no change")
                return ReloadResult(True, changes)
        log.error("config reload refused, keeping the running config: %s", "; ".join(problems))
        return ReloadResult(False, problems=problems)


def apply(gw: Gateway, new: GatewayConfig) -> list[str]:
    """Apply `new` to the running gateway; returns what changed, one phrase each."""
    old = gw.config
    new = _keep_bound(old, new)
    changes = [f"{key} changed" for key in _APPLIED if getattr(old, key) != getattr(new, key)]
    if old.admin.api_key != new.admin.api_key:
        changes.append("admin key changed")
    changes[:0] = _apply_backends(gw, old, new)
    if (old.routing.strategy, old.routing.max_imbalance) != (new.routing.strategy, new.routing.max_imbalance):
        gw.pool.strategy = routing.create(new.routing.strategy, new.routing.max_imbalance)
    gw.config = new
    gw.tenants.update(new.tenants)
    gw.endpoints.reconfigure(new)
    gw.forwarder.retries = new.retries
    gw.forwarder.expose_backend = new.exposes_backend()
    gw.upstream.timeouts = new.timeouts
    gw.router.admin = new.admin
    gw.queues.reconfigure(new)
    return changes


def _apply_backends(gw: Gateway, old: GatewayConfig, new: GatewayConfig) -> list[str]:
    changes: list[str] = []
    rebuild = (
        old.controller.algorithm,
        old.controller.params,
        old.sla,
        old.sla_models,
        old.queue_share,
        old.tenant_slas,
    ) != (
        new.controller.algorithm,
        new.controller.params,
        new.sla,
        new.sla_models,
        new.queue_share,
        new.tenant_slas,
    )
    current = {(b.name, b.url): b for b in gw.pool.backends}
    backends: list[Backend] = []
    for bc in new.backends:
        backend = current.pop((bc.name, bc.url), None)
        if backend is None:
            backend = gw.make_backend(bc, new)
            gw.watch(backend)
            changes.append(f"backend {bc.name} added")
        elif rebuild or bc != backend.config or old.health != new.health:
            backend.reconfigure(bc, new.health)
            sla = new.engine_sla(backend.models)
            algorithm = (
                algorithms.create(new.controller.algorithm, new.controller.params, sla)
                if rebuild
                else backend.limiter.algorithm
            )
            backend.limiter.reconfigure(
                algorithm,
                floor=bc.min_concurrency,
                max_limit=bc.max_concurrency,
                sla=sla,
            )
        backends.append(backend)
    for backend in current.values():
        gw.unwatch(backend)
        gw.pool.strategy.forget(backend.name)
        changes.append(f"backend {backend.name} removed")
    gw.pool.backends = tuple(backends)
    return changes


def _keep_bound(old: GatewayConfig, new: GatewayConfig) -> GatewayConfig:
    """The listeners and the shared state as they were set up at start; a change is logged."""
    bound = (old.host, old.port, old.limits, old.admin.host, old.admin.port, old.state)
    if bound != (new.host, new.port, new.limits, new.admin.host, new.admin.port, new.state):
        log.warning("config reload: listen.*, admin.host/port and state.* take effect only at the next start")
    return dataclasses.replace(
        new,
        host=old.host,
        port=old.port,
        limits=old.limits,
        admin=dataclasses.replace(new.admin, host=old.admin.host, port=old.admin.port),
        state=old.state,
        usage=old.usage,
    )
