"""Time series during a run: the gateway's `/admin/state`, the backends' vLLM `/metrics`, and RSS.

Every `interval` seconds (0.5 by default) one `Tick` is appended with, per backend, the gateway's
limit, inflight and P90s (when a gateway is in front) and the engine's KV usage, running and waiting
(from its own metrics), and the summed queue depth of every model. The gateway's resident memory
(VmRSS) and its peak (VmHWM) come from `/proc/PID/status`. How late each tick woke up measures
the load generator's own event-loop delay: when it is large, client-side latencies are inflated
by the client, not by the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from gateway.pool.vllm_metrics import VllmScrape, parse_vllm_metrics


@dataclass(slots=True)
class BackendTick:
    limit: int | None = None
    inflight: int | None = None
    healthy: bool | None = None
    in_rotation: bool | None = None
    ejected_for_s: float | None = None
    p90: dict[str, float | None] = field(default_factory=dict)
    kv_usage: float | None = None
    running: float | None = None
    waiting: float | None = None
    preemptions: float | None = None
    reason: str | None = None
    detail: str | None = None


@dataclass(slots=True)
class Tick:
    at: float
    backends: list[BackendTick]
    queue_depth: int | None = None
    rss_mb: float | None = None
    lag_s: float = 0.0
    """How late the sampler woke for this tick: the load generator's own event-loop delay."""


def read_memory_mb(pid: int) -> tuple[float, float] | None:
    """(VmRSS, VmHWM) of `pid` in MiB, or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


@dataclass(slots=True)
class Sampler:
    backend_urls: Sequence[str]
    gateway_url: str | None
    gateway_pid: int | None
    now: Callable[[], float]
    interval: float = 0.5
    ticks: list[Tick] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Sampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.read_peak()

    def read_peak(self) -> float:
        if self.gateway_pid is not None:
            mem = read_memory_mb(self.gateway_pid)
            if mem is not None:
                self.peak_rss_mb = max(self.peak_rss_mb, mem[1])
        return self.peak_rss_mb

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=max(2.0, 4 * self.interval))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            lag = 0.0
            while True:
                started = self.now()
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                    tick = await self._tick(session, started)
                    tick.lag_s = lag
                    self.ticks.append(tick)
                wake = max(started + self.interval, self.now())
                await asyncio.sleep(wake - self.now())
                lag = max(0.0, self.now() - wake)

    async def _get(self, session: aiohttp.ClientSession, url: str) -> str | None:
        try:
            async with session.get(url) as resp:
                return await resp.text() if resp.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ConnectionError):
            return None

    async def _tick(self, session: aiohttp.ClientSession, at: float) -> Tick:
        texts = await asyncio.gather(*(self._get(session, f"{u}/metrics") for u in self.backend_urls))
        backends = []
        for text in texts:
            scrape = parse_vllm_metrics(text) if text else VllmScrape()
            backends.append(
                BackendTick(
                    kv_usage=scrape.kv_usage,
                    running=scrape.running,
                    waiting=scrape.waiting,
                    preemptions=scrape.preemptions_total,
                )
            )
        tick = Tick(at=at, backends=backends)
        if self.gateway_url is not None:
            state_text = await self._get(session, f"{self.gateway_url}/admin/state")
            if state_text:
                self._merge_state(tick, json.loads(state_text))
        if self.gateway_pid is not None:
            mem = read_memory_mb(self.gateway_pid)
            if mem is not None:
                tick.rss_mb = mem[0]
                self.peak_rss_mb = max(self.peak_rss_mb, mem[1])
        return tick

    @staticmethod
    def _merge_state(tick: Tick, state: dict[str, Any]) -> None:
        for i, b in enumerate(state.get("backends", [])):
            if i >= len(tick.backends):
                tick.backends.append(BackendTick())
            bt = tick.backends[i]
            bt.limit, bt.inflight, bt.healthy = b.get("limit"), b.get("inflight"), b.get("healthy")
            bt.in_rotation, bt.ejected_for_s = b.get("in_rotation"), b.get("ejected_for_seconds")
            p90 = b.get("p90") or {}
            bt.p90 = {k: p90.get(k) for k in ("ttft", "tpot", "e2e")}
            decision = b.get("last_decision") or {}
            bt.reason, bt.detail = decision.get("reason"), decision.get("detail")
        models = state.get("models") or {}
        tick.queue_depth = sum(int(m.get("depth", 0)) for m in models.values())
