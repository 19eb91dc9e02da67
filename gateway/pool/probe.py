"""`check-config --probe`: ask each configured backend what it is, once, and say what it answered.

The same four endpoints the gateway reads while it runs, so a backend the probe finds usable is one
the gateway can use: `/health` (200 means the engine is up), `/version` (vLLM's own; other
OpenAI-compatible servers may lack it), `/v1/models` (what it serves; a pinned list is compared with
it) and `/metrics` (the KV cache's size from `vllm:cache_config_info`, which bounds useful
concurrency, and whether the engine's counters the controller reads are there at all).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import aiohttp
import orjson

from gateway.config.backends import BackendConfig
from gateway.pool.vllm_metrics import parse_vllm_metrics

_Get = Callable[[str], Awaitable[tuple[int, bytes]]]
"""GET a path of the backend: (status, body)."""


@dataclass(slots=True)
class ProbeReport:
    """What one backend answered; `problems` empty means the gateway can use it as configured."""

    name: str
    url: str
    reachable: bool = False
    version: str | None = None
    models: tuple[str, ...] = ()
    kv_tokens: int | None = None
    engine_metrics: bool = False
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """One line for the backend, then one per problem, for a terminal."""
        if not self.reachable:
            return [f"{self.name} ({self.url}): NOT REACHABLE", *(f"  {p}" for p in self.problems)]
        facts = [
            f"vLLM {self.version}" if self.version else "no /version (not vLLM?)",
            f"models: {', '.join(self.models) or 'none'}",
            f"KV cache {self.kv_tokens:,} tokens" if self.kv_tokens else "KV capacity unknown",
            "engine metrics read" if self.engine_metrics else "no vllm: metrics",
        ]
        head = f"{self.name} ({self.url}): reachable; {'; '.join(facts)}"
        return [head, *(f"  {p}" for p in self.problems)]


async def probe_backend(
    session: aiohttp.ClientSession, backend: BackendConfig, limit: aiohttp.ClientTimeout
) -> ProbeReport:
    report = ProbeReport(backend.name, backend.url)
    headers = {"Authorization": f"Bearer {backend.api_key}"} if backend.api_key else {}

    async def get(path: str) -> tuple[int, bytes]:
        async with session.get(f"{backend.url}{path}", timeout=limit, headers=headers) as resp:
            return resp.status, await resp.read()

    try:
        status, _ = await get("/health")
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        report.problems.append(f"/health: {exc.__class__.__name__}: {exc}".rstrip(": "))
        return report
    report.reachable = status == 200
    if status != 200:
        report.problems.append(f"/health answered {status} (200 means the engine is up)")
        return report
    await _read_details(report, backend, get)
    return report


async def _read_details(report: ProbeReport, backend: BackendConfig, get: _Get) -> None:
    try:
        status, body = await get("/version")
        if status == 200:
            report.version = str(orjson.loads(body).get("version") or "") or None
        status, body = await get("/v1/models")
        if status != 200:
            report.problems.append(f"/v1/models answered {status}")
        else:
            data = orjson.loads(body).get("data", [])
            report.models = tuple(str(m["id"]) for m in data if isinstance(m, dict) and "id" in m)
        missing = [m for m in backend.models if report.models and m not in report.models]
        if missing:
            report.problems.append(f"models pinned in the config but not served: {', '.join(missing)}")
        status, body = await get("/metrics")
        if status == 200:
            scrape = parse_vllm_metrics(body.decode(errors="replace"))
            report.kv_tokens = scrape.kv_capacity_tokens
            report.engine_metrics = scrape.kv_usage is not None or scrape.running is not None
        if not report.engine_metrics:
            report.problems.append(
                "no vLLM engine metrics on /metrics: the limit adapts on latency alone, with no KV ceiling"
            )
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError, AttributeError) as exc:
        report.problems.append(f"{exc.__class__.__name__}: {exc}".rstrip(": "))


async def probe_all(backends: Sequence[BackendConfig], seconds: float = 5.0) -> list[ProbeReport]:
    """Every backend probed at once, each request within `seconds`."""
    limit = aiohttp.ClientTimeout(total=seconds)
    async with aiohttp.ClientSession() as session:
        return list(await asyncio.gather(*(probe_backend(session, b, limit) for b in backends)))
