"""The whole config: `GatewayConfig`, its top-level keys, and `parse_config`, which hands each
section to its own parser (one module a section) with one shared reader, so every problem is
collected with its dotted path before any is raised.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.backends import BackendConfig, parse_backends
from gateway.config.batch import BatchConfig, parse_batch
from gateway.config.control import (
    DEFAULT_SLA,
    ControllerConfig,
    QueueConfig,
    check_algorithm,
    parse_controller,
    parse_queue,
    parse_sla,
)
from gateway.config.errors import ConfigError
from gateway.config.fairness import FairnessConfig, parse_fairness
from gateway.config.listen import LISTEN_KEYS, AdminConfig, ListenLimits, parse_admin, parse_listen_limits
from gateway.config.reader import MAX_SECONDS, ConfigReader, default
from gateway.config.routing import RoutingConfig, parse_routing
from gateway.config.sla import (
    DEFAULT_QUEUE_SHARE,
    engine_sla,
    merged,
    parse_queue_share,
    parse_sla_models,
)
from gateway.config.state import StateConfig, parse_state
from gateway.config.tenants import TenantConfig, parse_tenants
from gateway.config.upstream import (
    HeaderConfig,
    HealthConfig,
    TimeoutConfig,
    parse_headers,
    parse_health,
    parse_timeouts,
)
from gateway.config.usage import UsageConfig, parse_usage
from gateway.types import SLA

TOP_KEYS = {
    *("listen", "backends", "sla", "controller", "queue", "timeouts", "health", "tenants", "routing"),
    *("headers", "max_body_bytes", "retries", "shutdown_grace", "state", "admin", "batch"),
    *("fairness", "usage"),
}


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    backends: tuple[BackendConfig, ...]
    host: str = "127.0.0.1"
    port: int = 8080
    limits: ListenLimits = field(default_factory=ListenLimits)
    admin: AdminConfig = field(default_factory=AdminConfig)
    sla: SLA = DEFAULT_SLA
    """The default SLA, as the client sees it (see gateway.config.sla)."""
    sla_models: Mapping[str, SLA] = field(default_factory=dict)
    """Models with targets of their own (`sla.models`)."""
    queue_share: float = DEFAULT_QUEUE_SHARE
    """q: the share of the TTFT and e2e targets kept for the wait in the gateway's queue."""
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)
    timeouts: TimeoutConfig = field(default_factory=TimeoutConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    tenants: tuple[TenantConfig, ...] = ()
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    headers: HeaderConfig = field(default_factory=HeaderConfig)
    max_body_bytes: int = 16 * 1024 * 1024
    retries: int = 1
    shutdown_grace: float = 30.0
    state: StateConfig = field(default_factory=StateConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    fairness: FairnessConfig = field(default_factory=FairnessConfig)
    usage: UsageConfig = field(default_factory=UsageConfig)
    tenant_slas: Mapping[str, SLA] = field(init=False, repr=False, compare=False)
    """Tenants with targets of their own (their `sla`), by name: read from `tenants`."""

    def __post_init__(self) -> None:
        slas = {t.name: t.sla for t in self.tenants if t.sla is not None}
        object.__setattr__(self, "tenant_slas", slas)

    def exposes_backend(self) -> bool:
        """`x-gateway-backend` on answers: as `headers.expose_backend` says, else while no tenants
        are configured (which backend served a request tells a tenant about the others' load)."""
        expose = self.headers.expose_backend
        return not self.tenants if expose is None else expose

    def sla_for(self, model: str | None, tenant: str | None = None) -> SLA:
        """The client-side SLA of a request of `tenant` for `model`: the model's own targets
        (`sla.models`, else the default; the default's for None), each replaced by the one the
        tenant names in its `sla` (gateway.config.sla.merged). The one place targets are chosen."""
        base = self.sla if model is None else self.sla_models.get(model, self.sla)
        return base if tenant is None else merged(base, self.tenant_slas.get(tenant))

    def engine_sla(self, models: Iterable[str]) -> SLA:
        """The targets a backend serving `models` is controlled to: the strictest SLA of the traffic
        it may serve (each model's, and each tenant's merged over it) with the queue's share taken
        out (gateway.config.sla); the default's when no model is known."""
        served: list[str | None] = [*models] or [None]
        slas = [self.sla_for(m, t) for m in served for t in (None, *self.tenant_slas)]
        return engine_sla(slas, self.queue_share)


def parse_config(data: Mapping[str, Any], env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Build a GatewayConfig or raise ConfigError listing every problem found."""
    r = ConfigReader(os.environ if env is None else env)
    r.unknown(data, TOP_KEYS, "")
    listen = r.section(data, "listen", "")
    host, port = _parse_address(r, listen)
    config = GatewayConfig(  # keyword arguments run in order: so are the problems listed
        host=host,
        port=port,
        backends=parse_backends(r, data),
        sla=parse_sla(r, data),
        sla_models=parse_sla_models(r, _mapping(data.get("sla"))),
        queue_share=parse_queue_share(r, _mapping(data.get("sla"))),
        controller=parse_controller(r, data),
        queue=parse_queue(r, data),
        timeouts=parse_timeouts(r, data),
        health=parse_health(r, data),
        headers=parse_headers(r, data),
        tenants=parse_tenants(r, data),
        routing=parse_routing(r, data),
        limits=parse_listen_limits(r, listen),
        admin=parse_admin(r, data, port),
        **_parse_top(r, data),
    )
    check_algorithm(r, config.controller, config.sla)
    if r.problems:
        raise ConfigError(r.problems)
    return config


def _mapping(value: object) -> Mapping[str, Any]:
    """A section already checked to be a mapping (or reported), for a second parser to read."""
    return value if isinstance(value, Mapping) else {}


def _parse_address(r: ConfigReader, listen: Mapping[str, Any]) -> tuple[str, int]:
    r.unknown(listen, LISTEN_KEYS, "listen.")
    host = listen.get("host", default(GatewayConfig, "host"))
    if not isinstance(host, str) or not host:
        r.problems.append("listen.host: must be a host name or address")
        host = default(GatewayConfig, "host")
    port: int = r.number(
        listen, "port", default(GatewayConfig, "port"), "listen.", maximum=65535, integer=True
    )
    return host, port


def _parse_top(r: ConfigReader, data: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level numbers, then the sections whose problems are listed last."""
    return {
        "max_body_bytes": r.number(
            data,
            "max_body_bytes",
            default(GatewayConfig, "max_body_bytes"),
            "",
            minimum=1,
            maximum=2**30,
            integer=True,
        ),
        "retries": r.number(
            data, "retries", default(GatewayConfig, "retries"), "", maximum=100, integer=True
        ),
        "shutdown_grace": float(
            r.number(
                data, "shutdown_grace", default(GatewayConfig, "shutdown_grace"), "", maximum=MAX_SECONDS
            )
        ),
        "state": parse_state(r, data),
        "batch": parse_batch(r, data),
        "fairness": parse_fairness(r, data),
        "usage": parse_usage(r, data),
    }
