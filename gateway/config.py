"""Typed configuration, parsed once from a mapping (a YAML file or CLI flags) and validated.

Every problem is collected, not just the first, so `llm-gateway check-config` can print one line each.
Secrets never need to live in the file: any `api_key` may be given as `api_key_env: NAME` instead.
Every number must be finite and in its range (see gateway.config_reader).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from gateway.config_batch import BatchConfig, parse_batch
from gateway.config_reader import MAX_SECONDS, ConfigReader
from gateway.listen_config import LISTEN_KEYS, AdminConfig, ListenLimits, parse_admin, parse_listen_limits
from gateway.types import SLA

MIN_PRIORITY, MAX_PRIORITY = -1000, 1000
MAX_CONCURRENCY = 65_536
CREDENTIAL_HEADERS = frozenset(
    {b"x-api-key", b"api-key", b"cookie", b"openai-organization", b"openai-project"}
)
"""Client credentials never forwarded unless `headers.pass` names them (`Authorization` never is)."""


class ConfigError(Exception):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class BackendConfig:
    url: str
    name: str
    models: tuple[str, ...] = ()
    """Pinned model names; empty means discover them from the backend's /v1/models."""
    api_key: str | None = None
    min_concurrency: int = 1
    max_concurrency: int = 256


@dataclass(frozen=True, slots=True)
class TenantConfig:
    name: str
    api_keys: tuple[str, ...] = ()
    weight: float = 1.0
    priority: int = 0
    max_priority: int | None = None
    """Highest priority its requests may ask for with x-priority (default: `priority`)."""
    queue_timeout: float | None = None
    """Longest wait in the queue for this tenant's requests (default `queue.timeout`)."""

    @property
    def priority_limit(self) -> int:
        return self.priority if self.max_priority is None else self.max_priority


@dataclass(frozen=True, slots=True)
class HeaderConfig:
    sensitive: tuple[str, ...] = ()
    """Request headers dropped before forwarding, besides the client credentials always dropped."""
    passed: tuple[str, ...] = ()
    """Client credential headers forwarded anyway (`headers.pass`)."""


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    algorithm: str = "sla"
    params: Mapping[str, object] = field(default_factory=dict)
    interval: float = 1.0
    window_seconds: float = 30.0
    min_samples: int = 20


@dataclass(frozen=True, slots=True)
class QueueConfig:
    max_depth: int = 1024
    timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class TimeoutConfig:
    connect: float = 5.0
    first_byte: float = 300.0
    """Dispatch until the first body byte: the backend's own queue plus prefill."""
    idle: float = 60.0
    """Longest gap between two chunks of a response."""


@dataclass(frozen=True, slots=True)
class HealthConfig:
    interval: float = 1.0
    """Seconds between /health and /metrics scrapes of each backend."""
    failure_threshold: int = 3
    """Consecutive failed requests or checks before a backend is taken out."""
    backoff_initial: float = 1.0
    backoff_max: float = 30.0


@dataclass(frozen=True, slots=True)
class StateConfig:
    """Shared state for several processes and replicas (gateway.coordination); off without a URL."""

    redis_url: str | None = None
    lease_seconds: float = 10.0
    """A slot whose holder stops renewing comes back after this long."""
    namespace: str = "llm-gateway"
    """Key prefix: gateways naming the same Redis and namespace share their backends' state."""
    timeout: float = 0.5
    """Longest wait for one Redis command before falling back to the local share."""


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    strategy: str = "prefix"
    """prefix | least_loaded | round_robin (gateway.routing)."""
    max_imbalance: float = 0.2
    """No backend takes a request that would put it above (1 + this) x the mean load while
    another has room (prefix strategy)."""
    lookahead: int = 16
    """When a slot frees, how many of the waiters allowed to go next compete for it (1: first
    come, first served); each waiter is passed over at most this many times."""


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    backends: tuple[BackendConfig, ...]
    host: str = "127.0.0.1"
    port: int = 8080
    limits: ListenLimits = field(default_factory=ListenLimits)
    admin: AdminConfig = field(default_factory=AdminConfig)
    sla: SLA = field(default_factory=lambda: SLA(ttft_p90=1.0))
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

    def tenant_for_key(self) -> dict[str, TenantConfig]:
        return {key: t for t in self.tenants for key in t.api_keys}


def _backend_name(url: str, index: int) -> str:
    parts = urlsplit(url)
    return parts.netloc or f"backend-{index}"


def _parse_backend(r: ConfigReader, raw: Any, index: int) -> BackendConfig | None:
    path = f"backends[{index}]."
    if isinstance(raw, str):
        raw = {"url": raw}
    if not isinstance(raw, Mapping):
        r.problems.append(f"backends[{index}]: must be a URL or a mapping with 'url'")
        return None
    r.unknown(
        raw, {"url", "name", "models", "api_key", "api_key_env", "min_concurrency", "max_concurrency"}, path
    )
    url = raw.get("url")
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
        r.problems.append(f"{path}url: must be an http(s) URL like http://127.0.0.1:8000, got {url!r}")
        return None
    models = raw.get("models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
        r.problems.append(f"{path}models: must be a list of model names")
        models = []
    lo = r.number(raw, "min_concurrency", 1, path, minimum=1, maximum=MAX_CONCURRENCY, integer=True)
    hi = r.number(raw, "max_concurrency", 256, path, minimum=1, maximum=MAX_CONCURRENCY, integer=True)
    if lo > hi:
        r.problems.append(f"{path}min_concurrency: {lo} is above max_concurrency {hi}")
    name = raw.get("name") or _backend_name(url, index)
    return BackendConfig(
        url=url.rstrip("/"),
        name=str(name),
        models=tuple(models),
        api_key=r.secret(raw, "api_key", path),
        min_concurrency=lo,
        max_concurrency=hi,
    )


def _parse_tenant(r: ConfigReader, raw: Any, index: int) -> TenantConfig | None:
    path = f"tenants[{index}]."
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
        r.problems.append(f"tenants[{index}]: must be a mapping with a 'name'")
        return None
    r.unknown(
        raw, {"name", "api_keys", "api_keys_env", "weight", "priority", "max_priority", "queue_timeout"}, path
    )
    keys: list[str] = []
    listed = raw.get("api_keys", [])
    if not isinstance(listed, list) or not all(isinstance(k, str) and k for k in listed):
        r.problems.append(f"{path}api_keys: must be a list of strings")
    else:
        keys.extend(listed)
    env_names = raw.get("api_keys_env", [])
    if not isinstance(env_names, list):
        r.problems.append(f"{path}api_keys_env: must be a list of environment variable names")
        env_names = []
    for var in env_names:
        if var not in r.env:
            r.problems.append(f"{path}api_keys_env: environment variable {var!r} is not set")
        else:
            keys.append(r.env[var])
    priority = r.number(raw, "priority", 0, path, minimum=MIN_PRIORITY, maximum=MAX_PRIORITY, integer=True)
    top = None
    if raw.get("max_priority") is not None:
        top = r.number(raw, "max_priority", 0, path, minimum=priority, maximum=MAX_PRIORITY, integer=True)
    weight = r.number(raw, "weight", 1.0, path, exclusive=True, maximum=1e6)
    return TenantConfig(
        name=raw["name"],
        api_keys=tuple(keys),
        weight=float(weight),
        priority=priority,
        max_priority=top,
        queue_timeout=r.optional_seconds(raw, "queue_timeout", path),
    )


def _parse_state(r: ConfigReader, data: Mapping[str, Any]) -> StateConfig:
    from gateway.coordination.url import parse_redis_url

    raw = r.section(data, "state", "")
    r.unknown(raw, {"redis_url", "redis_url_env", "lease_seconds", "namespace", "timeout"}, "state.")
    url = r.secret(raw, "redis_url", "state.")
    if url is not None:
        try:
            parse_redis_url(url)
        except ValueError as exc:
            r.problems.append(f"state.redis_url: {exc}")
    lease = r.seconds(raw, "lease_seconds", 10.0, "state.")
    timeout = r.seconds(raw, "timeout", 0.5, "state.")
    if timeout >= lease / 3:
        r.problems.append(f"state.timeout: must be below lease_seconds / 3 ({lease / 3:g}), got {timeout:g}")
    namespace = raw.get("namespace", "llm-gateway")
    if not isinstance(namespace, str) or not namespace or "{" in namespace or "}" in namespace:
        r.problems.append(f"state.namespace: must be a non-empty name without braces, got {namespace!r}")
        namespace = "llm-gateway"
    return StateConfig(redis_url=url, lease_seconds=lease, namespace=namespace, timeout=timeout)


def parse_config(data: Mapping[str, Any], env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Build a GatewayConfig or raise ConfigError listing every problem found."""
    r = ConfigReader(os.environ if env is None else env)
    r.unknown(
        data,
        {
            "listen",
            "backends",
            "sla",
            "controller",
            "queue",
            "timeouts",
            "health",
            "tenants",
            "routing",
            "headers",
            "max_body_bytes",
            "retries",
            "shutdown_grace",
            "state",
            "admin",
            "batch",
        },
        "",
    )
    listen = r.section(data, "listen", "")
    r.unknown(listen, LISTEN_KEYS, "listen.")
    host = listen.get("host", "127.0.0.1")
    if not isinstance(host, str) or not host:
        r.problems.append("listen.host: must be a host name or address")
        host = "127.0.0.1"
    port = r.number(listen, "port", 8080, "listen.", maximum=65535, integer=True)

    raw_backends = data.get("backends")
    backends: list[BackendConfig] = []
    if not isinstance(raw_backends, list) or not raw_backends:
        r.problems.append("backends: at least one backend is required (a list of URLs or mappings)")
    else:
        for i, raw in enumerate(raw_backends):
            if (b := _parse_backend(r, raw, i)) is not None:
                backends.append(b)
        names = [b.name for b in backends]
        for dup in sorted({n for n in names if names.count(n) > 1}):
            r.problems.append(f"backends: name {dup!r} is used more than once")

    sla_raw = r.section(data, "sla", "")
    r.unknown(sla_raw, {"ttft_p90", "tpot_p90", "e2e_p90"}, "sla.")
    sla = SLA(*(r.optional_seconds(sla_raw, k, "sla.") for k in ("ttft_p90", "tpot_p90", "e2e_p90")))
    if not sla.targets() and "sla" not in data:
        sla = SLA(ttft_p90=1.0)

    c = r.section(data, "controller", "")
    r.unknown(c, {"algorithm", "params", "interval", "window_seconds", "min_samples"}, "controller.")
    params = c.get("params", {})
    if not isinstance(params, Mapping):
        r.problems.append("controller.params: must be a mapping")
        params = {}
    controller = ControllerConfig(
        algorithm=str(c.get("algorithm", "sla")),
        params=dict(params),
        interval=r.seconds(c, "interval", 1.0, "controller."),
        window_seconds=r.seconds(c, "window_seconds", 30.0, "controller."),
        min_samples=r.number(c, "min_samples", 20, "controller.", minimum=1, maximum=1e6, integer=True),
    )

    q = r.section(data, "queue", "")
    r.unknown(q, {"max_depth", "timeout"}, "queue.")
    queue = QueueConfig(
        max_depth=r.number(q, "max_depth", 1024, "queue.", maximum=1e6, integer=True),
        timeout=r.seconds(q, "timeout", 30.0, "queue."),
    )
    t = r.section(data, "timeouts", "")
    r.unknown(t, {"connect", "first_byte", "idle"}, "timeouts.")
    timeouts = TimeoutConfig(
        *(
            r.seconds(t, k, d, "timeouts.")
            for k, d in (("connect", 5.0), ("first_byte", 300.0), ("idle", 60.0))
        )
    )
    health = _parse_health(r, r.section(data, "health", ""))
    headers = _parse_headers(r, r.section(data, "headers", ""))
    raw_tenants = data.get("tenants", [])
    tenants: list[TenantConfig] = []
    if not isinstance(raw_tenants, list):
        r.problems.append("tenants: must be a list")
    else:
        for i, raw in enumerate(raw_tenants):
            if (tc := _parse_tenant(r, raw, i)) is not None:
                tenants.append(tc)
        seen: dict[str, str] = {}
        for tc in tenants:
            for key in tc.api_keys:
                if key in seen and seen[key] != tc.name:
                    r.problems.append(f"tenants: an API key is given to both {seen[key]!r} and {tc.name!r}")
                seen[key] = tc.name

    routing = _parse_routing(r, r.section(data, "routing", ""))
    config = GatewayConfig(
        backends=tuple(backends),
        host=host,
        port=port,
        limits=parse_listen_limits(r, listen),
        admin=parse_admin(r, data, port),
        sla=sla,
        controller=controller,
        queue=queue,
        timeouts=timeouts,
        health=health,
        tenants=tuple(tenants),
        routing=routing,
        headers=headers,
        max_body_bytes=r.number(
            data, "max_body_bytes", 16 * 1024 * 1024, "", minimum=1, maximum=2**30, integer=True
        ),
        retries=r.number(data, "retries", 1, "", maximum=100, integer=True),
        shutdown_grace=float(r.number(data, "shutdown_grace", 30.0, "", maximum=MAX_SECONDS)),
        state=_parse_state(r, data),
        batch=parse_batch(r, data),
    )
    _check_algorithm(r, config)
    if r.problems:
        raise ConfigError(r.problems)
    return config


def _parse_routing(r: ConfigReader, raw: Mapping[str, Any]) -> RoutingConfig:
    from gateway.routing import STRATEGIES

    r.unknown(raw, {"strategy", "max_imbalance", "lookahead"}, "routing.")
    strategy = raw.get("strategy", "prefix")
    if strategy not in STRATEGIES:
        r.problems.append(f"routing.strategy: must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        strategy = "prefix"
    return RoutingConfig(
        strategy=strategy,
        max_imbalance=float(r.number(raw, "max_imbalance", 0.2, "routing.", maximum=1e6)),
        lookahead=r.number(raw, "lookahead", 16, "routing.", minimum=1, maximum=1e6, integer=True),
    )


def _parse_health(r: ConfigReader, h: Mapping[str, Any]) -> HealthConfig:
    r.unknown(h, {"interval", "failure_threshold", "backoff_initial", "backoff_max"}, "health.")
    health = HealthConfig(
        interval=r.seconds(h, "interval", 1.0, "health."),
        failure_threshold=r.number(
            h, "failure_threshold", 3, "health.", minimum=1, maximum=1e6, integer=True
        ),
        backoff_initial=r.seconds(h, "backoff_initial", 1.0, "health."),
        backoff_max=r.seconds(h, "backoff_max", 30.0, "health."),
    )
    if health.backoff_initial > health.backoff_max:
        r.problems.append(
            f"health.backoff_initial: {health.backoff_initial:g} is above backoff_max {health.backoff_max:g}"
        )
    return health


def _parse_headers(r: ConfigReader, h: Mapping[str, Any]) -> HeaderConfig:
    r.unknown(h, {"sensitive", "pass"}, "headers.")
    headers = HeaderConfig(
        sensitive=r.names(h, "sensitive", "headers."), passed=r.names(h, "pass", "headers.")
    )
    for name in headers.passed:
        if name.encode() not in CREDENTIAL_HEADERS:
            known = ", ".join(sorted(c.decode() for c in CREDENTIAL_HEADERS))
            r.problems.append(f"headers.pass: {name!r} is not a header the gateway drops ({known})")
    return headers


def _check_algorithm(r: ConfigReader, config: GatewayConfig) -> None:
    from gateway import limits

    try:
        limits.create(config.controller.algorithm, config.controller.params, config.sla)
    except ValueError as exc:
        r.problems.append(f"controller: {exc}")


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> GatewayConfig:
    return parse_config(read_mapping(path), env)


def read_mapping(path: str | Path) -> Mapping[str, Any]:
    """The YAML file at `path` as a mapping, or ConfigError saying why it is not one."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML: {exc}"]) from exc
    if not isinstance(data, Mapping):
        raise ConfigError([f"{path}: the top level must be a mapping"])
    return data
