"""Active health checks and metric scrapes, one loop per backend.

Every `health.interval`: GET /health (200 means the engine is alive), GET /metrics (parsed into
EngineStats for the limiter; the prefix-cache counters' growth, whose going back means the server
restarted and lost its cache), and GET /v1/models when the backend has no models yet or just came
back. A failed check counts like a failed request toward ejection; a passing one puts the backend back
once its ejection backoff has run out.

A check that connected but got no answer in time does not eject the last backend in rotation for one
of its models: an engine that is busy (a long prefill, a CPU-starved API server) answers late, and
without it every request would get 503 `no_backend` until a check passed and the backoff ran out,
while with it they wait in the queue and are served once it catches up. Refused or dropped
connections, a failed connect and a check answered with an error eject it as before, and a request
that fails to connect or times out before its first byte ejects it regardless (gateway.proxy.forwarder).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import aiohttp
import orjson

from gateway.pool.backends import Backend
from gateway.pool.histogram import window_count, window_quantile
from gateway.pool.vllm_metrics import VllmScrape, parse_vllm_metrics
from gateway.types import Clock, EngineStats

log = logging.getLogger("gateway.pool.monitor")


class BackendMonitor:
    def __init__(
        self,
        backend: Backend,
        session: aiohttp.ClientSession,
        *,
        clock: Clock,
        timeout: float,
        on_available: Callable[[Backend], None],
        last_in_rotation: Callable[[Backend], bool],
        scrapes: Callable[[Backend], bool] | None = None,
    ) -> None:
        self.backend = backend
        self._session = session
        self._clock = clock
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._on_available = on_available
        self._last_in_rotation = last_in_rotation
        self._scrapes = scrapes
        """Whether to read /metrics now; with shared state only the backend's leader does."""
        self._previous: VllmScrape | None = None
        self._previous_at = 0.0

    @property
    def _headers(self) -> dict[str, str]:
        """Read per check: a reload may change the backend's key."""
        key = self.backend.config.api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def check_once(self) -> None:
        b = self.backend
        try:
            await self._check()
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            reason = f"health check failed: {exc.__class__.__name__}: {exc}".rstrip(": ")
            if b.healthy:
                late = isinstance(exc, TimeoutError) and not isinstance(exc, aiohttp.ConnectionTimeoutError)
                b.record_failure(reason, may_eject=not (late and self._last_in_rotation(b)))  # logs ejections
            else:
                b.last_error = reason
            return
        if b.mark_healthy():
            log.info("backend %s is healthy, models: %s", b.name, ", ".join(sorted(b.models)))
        if b.in_rotation(self._clock()):
            self._on_available(b)

    async def _check(self) -> None:
        b = self.backend
        async with self._session.get(f"{b.url}/health", timeout=self._timeout, headers=self._headers) as resp:
            if resp.status != 200:
                raise ValueError(f"/health answered {resp.status}")
            await resp.read()
        if not b.config.models and (not b.models or not b.healthy):
            async with self._session.get(
                f"{b.url}/v1/models", timeout=self._timeout, headers=self._headers
            ) as resp:
                if resp.status != 200:
                    raise ValueError(f"/v1/models answered {resp.status}")
                data = orjson.loads(await resp.read())
            b.models = frozenset(m["id"] for m in data.get("data", []) if isinstance(m, dict))
        if self._scrapes is not None and not self._scrapes(b):
            return  # another process reads the engine's counters and shares them
        async with self._session.get(
            f"{b.url}/metrics", timeout=self._timeout, headers=self._headers
        ) as resp:
            if resp.status != 200:
                return  # not every OpenAI-compatible server exports metrics; latency still works
            text = await resp.text()
        scrape = parse_vllm_metrics(text)
        now = self._clock()
        stats = to_engine_stats(scrape, self._previous, now, previous_at=self._previous_at)
        queries, hits, restarted = prefix_cache_growth(scrape, self._previous)
        b.observe_prefix_cache(queries, hits, restarted=restarted)
        self._previous, self._previous_at = scrape, now
        b.engine_stats = stats
        b.limiter.observe(stats)


def to_engine_stats(
    scrape: VllmScrape, previous: VllmScrape | None, now: float, *, previous_at: float = 0.0
) -> EngineStats:
    """Turn a scrape, and the difference from the one taken at `previous_at`, into the limiter's view."""

    def p90(signal: str) -> float | None:
        current = scrape.histograms.get(signal)
        if not current:
            return None
        before = previous.histograms.get(signal) if previous is not None else None
        if before is None or window_count(before, current) <= 0:
            return None
        return window_quantile(0.9, before, current)

    finished = 0.0
    e2e = scrape.histograms.get("e2e")
    if e2e and previous is not None and (before := previous.histograms.get("e2e")):
        finished = window_count(before, e2e)
    rate = None
    tokens, before_tokens = scrape.generation_tokens, previous.generation_tokens if previous else None
    if tokens is not None and before_tokens is not None and tokens >= before_tokens and now > previous_at:
        rate = (tokens - before_tokens) / (now - previous_at)
    queries, hits, _ = prefix_cache_growth(scrape, previous)
    return EngineStats(
        at=now,
        generation_rate=rate,
        prefix_hit_share=hits / queries if queries > 0 else None,
        kv_usage=scrape.kv_usage,
        waiting=scrape.waiting,
        running=scrape.running,
        preemptions_total=scrape.preemptions_total,
        kv_capacity_tokens=scrape.kv_capacity_tokens,
        ttft_p90=p90("ttft"),
        tpot_p90=p90("tpot"),
        finished=finished,
    )


def prefix_cache_growth(scrape: VllmScrape, previous: VllmScrape | None) -> tuple[float, float, bool]:
    """(queries, hits) the backend's prefix cache counted since the previous scrape, and whether the
    counters went back (the server restarted, so its cache is empty and they count from zero)."""
    queries, hits = scrape.prefix_queries, scrape.prefix_hits
    if queries is None or hits is None or previous is None or previous.prefix_queries is None:
        return 0.0, 0.0, False
    if queries < previous.prefix_queries:
        return queries, hits, True
    return queries - previous.prefix_queries, hits - (previous.prefix_hits or 0.0), False
