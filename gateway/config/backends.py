"""The `backends` section: the vLLM servers, by URL or as mappings, each with its concurrency bounds.

A bare URL is a backend with every default. Names default to the URL's host:port and must be unique,
since metrics, logs and reloads know a backend by its name.

A URL is the server's root: the gateway adds `/health`, `/metrics` and `/v1/...` itself. One ending
in `/v1` (the OpenAI SDK's `base_url`, the likeliest copy-paste) is refused with the URL to give
instead, rather than stripped: a file that says one thing while the gateway does another would
mislead whoever reads it next, and `check-config` points at the line to fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gateway.config.reader import ConfigReader, default

MAX_CONCURRENCY = 65_536


@dataclass(frozen=True, slots=True)
class BackendConfig:
    url: str
    name: str
    models: tuple[str, ...] = ()
    """Pinned model names; empty means discover them from the backend's /v1/models."""
    api_key: str | None = None
    min_concurrency: int = 1
    max_concurrency: int = 256


_KEYS = {"url", "name", "models", "api_key", "api_key_env", "min_concurrency", "max_concurrency"}


def parse_backends(r: ConfigReader, data: Mapping[str, Any]) -> tuple[BackendConfig, ...]:
    raw_backends = data.get("backends")
    if not isinstance(raw_backends, list) or not raw_backends:
        r.problems.append("backends: at least one backend is required (a list of URLs or mappings)")
        return ()
    backends = [b for i, raw in enumerate(raw_backends) if (b := _parse_backend(r, raw, i)) is not None]
    names = [b.name for b in backends]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        r.problems.append(f"backends: name {dup!r} is used more than once")
    return tuple(backends)


def _parse_backend(r: ConfigReader, raw: Any, index: int) -> BackendConfig | None:
    path = f"backends[{index}]."
    if isinstance(raw, str):
        raw = {"url": raw}
    if not isinstance(raw, Mapping):
        r.problems.append(f"backends[{index}]: must be a URL or a mapping with 'url'")
        return None
    r.unknown(raw, _KEYS, path)
    url = raw.get("url")
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
        r.problems.append(f"{path}url: must be an http(s) URL like http://127.0.0.1:8000, got {url!r}")
        return None
    if urlsplit(url).path.rstrip("/").endswith("/v1"):
        root = url.rstrip("/")[: -len("/v1")]
        r.problems.append(
            f"{path}url: {url!r} ends in /v1; give the server's root, {root!r} (the gateway adds /v1 itself)"
        )
        return None
    models = raw.get("models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
        r.problems.append(f"{path}models: must be a list of model names")
        models = []
    bounds = {
        key: r.number(
            raw, key, default(BackendConfig, key), path, minimum=1, maximum=MAX_CONCURRENCY, integer=True
        )
        for key in ("min_concurrency", "max_concurrency")
    }
    if bounds["min_concurrency"] > bounds["max_concurrency"]:
        r.problems.append(
            f"{path}min_concurrency: {bounds['min_concurrency']} is above max_concurrency"
            f" {bounds['max_concurrency']}"
        )
    return BackendConfig(
        url=url.rstrip("/"),
        name=str(raw.get("name") or urlsplit(url).netloc or f"backend-{index}"),
        models=tuple(models),
        api_key=r.secret(raw, "api_key", path),
        **bounds,
    )
