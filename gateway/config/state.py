"""The `state` section: admission state shared through Redis by several gateway processes.

Off without `redis_url`. A Redis command may take at most a third of the lease, so that a renewal
that times out once still leaves time for another before the lease lapses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config.reader import ConfigReader, default


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


def parse_state(r: ConfigReader, data: Mapping[str, Any]) -> StateConfig:
    from gateway.coordination.url import parse_redis_url

    raw = r.section(data, "state", "")
    r.unknown(raw, {"redis_url", "redis_url_env", "lease_seconds", "namespace", "timeout"}, "state.")
    url = r.secret(raw, "redis_url", "state.")
    if url is not None:
        try:
            parse_redis_url(url)
        except ValueError as exc:
            r.problems.append(f"state.redis_url: {exc}")
    lease = r.seconds(raw, "lease_seconds", default(StateConfig, "lease_seconds"), "state.")
    timeout = r.seconds(raw, "timeout", default(StateConfig, "timeout"), "state.")
    if timeout >= lease / 3:
        r.problems.append(f"state.timeout: must be below lease_seconds / 3 ({lease / 3:g}), got {timeout:g}")
    namespace = raw.get("namespace", default(StateConfig, "namespace"))
    if not isinstance(namespace, str) or not namespace or "{" in namespace or "}" in namespace:
        r.problems.append(f"state.namespace: must be a non-empty name without braces, got {namespace!r}")
        namespace = default(StateConfig, "namespace")
    return StateConfig(redis_url=url, lease_seconds=lease, namespace=namespace, timeout=timeout)
