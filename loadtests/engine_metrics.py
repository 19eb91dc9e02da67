"""The engine's own view of a load run: vLLM's `/metrics` sampled while the load runs.

A sampler scrapes waiting, running, KV usage and the preemption counter every half second; two
scrapes (end of warm-up, end of load) difference the TTFT and inter-token histograms so that
their P90 covers the steady window only, as the load's throughput does. The quantile inside a
bucket is interpolated as Prometheus' histogram_quantile does (the gateway's own
implementation). `wait_idle` blocks until the engine has nothing running or waiting, so that a
run does not start while the previous one's aborted requests still occupy the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import dataclass

import aiohttp

from gateway.pool.histogram import window_quantile

SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LE_RE = re.compile(r'le="([^"]+)"')
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"

Metrics = dict[str, list[tuple[str, float]]]


@dataclass
class EngineSample:
    at: float
    waiting: float
    running: float
    kv_usage: float
    preemptions: float


def parse_metrics(text: str) -> Metrics:
    """Prometheus text format to {name: [(labels, value), ...]}."""
    out: Metrics = {}
    for line in text.splitlines():
        match = SAMPLE_RE.match(line)
        if match:
            name, labels, value = match.groups()
            out.setdefault(name, []).append((labels or "", float(value)))
    return out


def metric_value(metrics: Metrics, name: str) -> float:
    return sum(value for _, value in metrics.get(name, []))


def histogram_buckets(metrics: Metrics, name: str) -> dict[float, float]:
    buckets: dict[float, float] = {}
    for labels, value in metrics.get(name + "_bucket", []):
        le = LE_RE.search(labels)
        if le:
            bound = float(le.group(1))
            buckets[bound] = buckets.get(bound, 0.0) + value
    return buckets


def histogram_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """Quantile of the observations added between two scrapes; NaN when none."""
    value = window_quantile(q, before, after)
    return float("nan") if value is None else value


async def scrape(session: aiohttp.ClientSession, metrics_url: str) -> Metrics:
    async with session.get(metrics_url) as response:
        return parse_metrics(await response.text())


def sample_of(metrics: Metrics, at: float) -> EngineSample:
    return EngineSample(
        at=at,
        waiting=metric_value(metrics, "vllm:num_requests_waiting"),
        running=metric_value(metrics, "vllm:num_requests_running"),
        kv_usage=metric_value(metrics, "vllm:kv_cache_usage_perc"),
        preemptions=metric_value(metrics, "vllm:num_preemptions_total"),
    )


class EngineWatch:
    """Samples one engine while a load runs; `finish` returns the steady-window histogram P90s."""

    def __init__(self, session: aiohttp.ClientSession, engine_url: str, interval_s: float = 0.5) -> None:
        self._session = session
        self._url = engine_url.rstrip("/") + "/metrics"
        self._interval = interval_s
        self.samples: list[EngineSample] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._before: asyncio.Task[Metrics] | None = None

    def start(self, warmup_s: float) -> None:
        self._task = asyncio.create_task(self._sample())
        self._before = asyncio.create_task(self._scrape_after(warmup_s))

    async def _scrape_after(self, delay_s: float) -> Metrics:
        await asyncio.sleep(delay_s)
        return await scrape(self._session, self._url)

    async def _sample(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(aiohttp.ClientError):
                self.samples.append(sample_of(await scrape(self._session, self._url), time.monotonic()))
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=self._interval)
            except TimeoutError:
                continue

    async def finish(self) -> tuple[float, float]:
        """Stop sampling; (engine TTFT P90, inter-token P90) over the window since the warm-up."""
        assert self._task is not None and self._before is not None
        after = await scrape(self._session, self._url)
        before = await self._before
        self._stop.set()
        await self._task
        return (
            histogram_quantile(histogram_buckets(before, TTFT), histogram_buckets(after, TTFT), 0.9),
            histogram_quantile(histogram_buckets(before, ITL), histogram_buckets(after, ITL), 0.9),
        )


async def wait_idle(engine_url: str, timeout_s: float = 60.0, poll_s: float = 0.5) -> bool:
    """Wait until the engine reports nothing running or waiting; False if it never did."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        while time.monotonic() < deadline:
            try:
                metrics = await scrape(session, engine_url.rstrip("/") + "/metrics")
                sample = sample_of(metrics, time.monotonic())
                if sample.running == 0 and sample.waiting == 0:
                    return True
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(poll_s)
    return False
