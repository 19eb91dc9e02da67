"""The `timeouts`, `health` and `headers` sections: how the gateway talks to its backends.

Timeouts bound each phase of one exchange; health sets how often each backend is checked and how
long an ejected one stays out (an exponential backoff, so its initial step may not exceed its cap);
headers name what is dropped before forwarding. Client credentials (CREDENTIAL_HEADERS) are dropped
unless `headers.pass` names them, and only they may be named there: passing any other header is
already the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from gateway.config.reader import ConfigReader, default

CREDENTIAL_HEADERS = frozenset(
    {b"x-api-key", b"api-key", b"cookie", b"openai-organization", b"openai-project"}
)
"""Client credentials never forwarded unless `headers.pass` names them (`Authorization` never is)."""


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
class HeaderConfig:
    sensitive: tuple[str, ...] = ()
    """Request headers dropped before forwarding, besides the client credentials always dropped."""
    passed: tuple[str, ...] = ()
    """Client credential headers forwarded anyway (`headers.pass`)."""
    expose_backend: bool | None = None
    """Name the backend in `x-gateway-backend`; None: only while no tenants are configured."""


def parse_timeouts(r: ConfigReader, data: Mapping[str, Any]) -> TimeoutConfig:
    t = r.section(data, "timeouts", "")
    r.unknown(t, {"connect", "first_byte", "idle"}, "timeouts.")
    d = TimeoutConfig()
    return TimeoutConfig(**{f.name: r.seconds(t, f.name, getattr(d, f.name), "timeouts.") for f in fields(d)})


def parse_health(r: ConfigReader, data: Mapping[str, Any]) -> HealthConfig:
    h = r.section(data, "health", "")
    path = "health."
    r.unknown(h, {"interval", "failure_threshold", "backoff_initial", "backoff_max"}, path)
    health = HealthConfig(
        interval=r.seconds(h, "interval", default(HealthConfig, "interval"), path),
        failure_threshold=r.number(
            h,
            "failure_threshold",
            default(HealthConfig, "failure_threshold"),
            path,
            minimum=1,
            maximum=1e6,
            integer=True,
        ),
        backoff_initial=r.seconds(h, "backoff_initial", default(HealthConfig, "backoff_initial"), path),
        backoff_max=r.seconds(h, "backoff_max", default(HealthConfig, "backoff_max"), path),
    )
    if health.backoff_initial > health.backoff_max:
        r.problems.append(
            f"health.backoff_initial: {health.backoff_initial:g} is above backoff_max {health.backoff_max:g}"
        )
    return health


def parse_headers(r: ConfigReader, data: Mapping[str, Any]) -> HeaderConfig:
    h = r.section(data, "headers", "")
    r.unknown(h, {"sensitive", "pass", "expose_backend"}, "headers.")
    expose = h.get("expose_backend")
    if expose is not None and not isinstance(expose, bool):
        r.problems.append("headers.expose_backend: must be true or false")
        expose = None
    headers = HeaderConfig(
        sensitive=r.names(h, "sensitive", "headers."),
        passed=r.names(h, "pass", "headers."),
        expose_backend=expose,
    )
    for name in headers.passed:
        if name.encode() not in CREDENTIAL_HEADERS:
            known = ", ".join(sorted(c.decode() for c in CREDENTIAL_HEADERS))
            r.problems.append(f"headers.pass: {name!r} is not a header the gateway drops ({known})")
    return headers
