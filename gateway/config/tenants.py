"""The `tenants` section: who a client is (by API key), its weight and priorities in the queue, and
its quotas (tokens and requests per minute, requests at once; absent means unlimited).

A tenant's `sla` names client-side targets of its own: each replaces that target of the model its
request is for, the others stay the model's (gateway.config.sla). An API key names one tenant only,
since admission looks the tenant up by the key. Keys may come from the environment (`api_keys_env`)
so that no secret needs to live in the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config.reader import ConfigReader, default
from gateway.config.sla import parse_targets
from gateway.types import SLA

MIN_PRIORITY, MAX_PRIORITY = -1000, 1000


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
    tokens_per_minute: int | None = None
    """Prompt plus output tokens per minute, across every process sharing `state.redis_url`."""
    requests_per_minute: int | None = None
    max_concurrent: int | None = None
    """Requests of this tenant under way at once (waiting in the queue or answering)."""
    sla: SLA | None = None
    """Targets of its own, each replacing the model's for its requests (None: the model's SLA)."""

    @property
    def has_quota(self) -> bool:
        return any(
            q is not None for q in (self.tokens_per_minute, self.requests_per_minute, self.max_concurrent)
        )

    @property
    def priority_limit(self) -> int:
        return self.priority if self.max_priority is None else self.max_priority


_QUOTAS = ("tokens_per_minute", "requests_per_minute", "max_concurrent")
_KEYS = {
    *("name", "api_keys", "api_keys_env", "weight", "priority", "max_priority", "queue_timeout", "sla"),
    *_QUOTAS,
}
MAX_QUOTA = 10**12


def parse_tenants(r: ConfigReader, data: Mapping[str, Any]) -> tuple[TenantConfig, ...]:
    raw_tenants = data.get("tenants", [])
    if not isinstance(raw_tenants, list):
        r.problems.append("tenants: must be a list")
        return ()
    tenants = [t for i, raw in enumerate(raw_tenants) if (t := _parse_tenant(r, raw, i)) is not None]
    seen: dict[str, str] = {}
    for tc in tenants:
        for key in tc.api_keys:
            if key in seen and seen[key] != tc.name:
                r.problems.append(f"tenants: an API key is given to both {seen[key]!r} and {tc.name!r}")
            seen[key] = tc.name
    return tuple(tenants)


def _parse_tenant(r: ConfigReader, raw: Any, index: int) -> TenantConfig | None:
    path = f"tenants[{index}]."
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
        r.problems.append(f"tenants[{index}]: must be a mapping with a 'name'")
        return None
    r.unknown(raw, _KEYS, path)
    keys = _api_keys(r, raw, path)
    priority = r.number(
        raw,
        "priority",
        default(TenantConfig, "priority"),
        path,
        minimum=MIN_PRIORITY,
        maximum=MAX_PRIORITY,
        integer=True,
    )
    top = None
    if raw.get("max_priority") is not None:
        top = r.number(raw, "max_priority", 0, path, minimum=priority, maximum=MAX_PRIORITY, integer=True)
    weight = r.number(raw, "weight", default(TenantConfig, "weight"), path, exclusive=True, maximum=1e6)
    return TenantConfig(
        name=raw["name"],
        api_keys=keys,
        weight=float(weight),
        priority=priority,
        max_priority=top,
        queue_timeout=r.optional_seconds(raw, "queue_timeout", path),
        sla=None if raw.get("sla") is None else parse_targets(r, raw["sla"], f"{path}sla"),
        **{
            key: r.number(raw, key, 1, path, minimum=1, maximum=MAX_QUOTA, integer=True)
            for key in _QUOTAS
            if raw.get(key) is not None
        },
    )


def _api_keys(r: ConfigReader, raw: Mapping[str, Any], path: str) -> tuple[str, ...]:
    """`api_keys` as listed, then those of `api_keys_env` read from the environment."""
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
    return tuple(keys)
