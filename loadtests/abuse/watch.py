"""What is watched while an attack runs: the gateway's RSS, its event-loop lag, how fast a new client
gets /health answered, how ordinary requests fare, and what is left in flight afterwards.

- RSS: VmRSS of the gateway process from /proc, sampled every 0.1 s; the maximum is reported.
- Event-loop lag: the gateway's `gateway_event_loop_lag_seconds` histogram, read before and after
  the attack; P99 of the difference (Prometheus' histogram_quantile, gateway.pool.histogram) and the
  upper bound of the highest bucket reached. A gateway without the metric reports none.
- /health: every 50 ms a new connection sends `GET /health`; the time to the whole answer. A probe
  that fails or takes over PROBE_TIMEOUT counts as failed and as PROBE_TIMEOUT in the percentiles;
  an answer other than 200 counts as failed too. The probes run in a child process of their own
  (`loadtests.abuse.probe`, which imports nothing heavy): in the benchmark's event loop they waited
  behind the attacks themselves (one step of the idle-connection attack, re-checking 1,100 sockets, held that
  loop for up to 1.3 s on a busy machine), and measured the benchmark instead of the gateway.
- Requests: LEGIT_WORKERS OpenAI SDK clients send small completions in a closed loop, no retries.
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from gateway.pool.histogram import Buckets, bucket_delta, window_quantile
from loadtests.stats import percentile

LEGIT_WORKERS = 4
LAG_METRIC = "gateway_event_loop_lag_seconds"
CHECKOUT = str(Path(__file__).resolve().parents[2])
"""Where `python -m loadtests...` finds this package."""


def rss_mb(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


@dataclass
class Observed:
    rss_max: float = 0.0
    probes: list[float] = field(default_factory=list)
    probe_failures: int = 0
    ok: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def health(self, q: float) -> float | None:
        return percentile(self.probes, q)


async def sample_rss(pid: int, seen: Observed, stop: asyncio.Event) -> None:
    while not stop.is_set():
        rss = rss_mb(pid)
        if rss is not None:
            seen.rss_max = max(seen.rss_max, rss)
        await asyncio.sleep(0.1)


async def probe_health(port: int, seen: Observed, stop: asyncio.Event) -> None:
    """Probe from a child process until `stop`; its probes and failures go into `seen`."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "loadtests.abuse.probe",
        str(port),
        stdout=asyncio.subprocess.PIPE,
        cwd=CHECKOUT,
    )
    try:
        await stop.wait()
    finally:
        if child.returncode is None:
            child.send_signal(signal.SIGTERM)
        out, _ = await child.communicate()
    probed = json.loads(out) if out else {}
    seen.probes.extend(probed.get("probes", []))
    seen.probe_failures += probed.get("probe_failures", 0)


async def legit_load(url: str, model: str, seen: Observed, stop: asyncio.Event) -> None:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0, timeout=30)

    async def worker() -> None:
        while not stop.is_set():
            try:
                await client.completions.create(model=model, prompt="hello", max_tokens=16)
                seen.ok += 1
            except openai.OpenAIError as exc:
                seen.failed += 1
                kind = getattr(exc, "status_code", None) or type(exc).__name__
                seen.errors[str(kind)] = seen.errors.get(str(kind), 0) + 1
                await asyncio.sleep(0.1)

    await asyncio.gather(*(worker() for _ in range(LEGIT_WORKERS)))
    await client.close()


async def lag_buckets(url: str) -> Buckets | None:
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            text = (await client.get(f"{url}/metrics")).text
    except httpx.HTTPError:
        return None
    for family in text_string_to_metric_families(text):
        if family.name == LAG_METRIC:
            return {
                float(s.labels["le"]): s.value for s in family.samples if s.name == f"{LAG_METRIC}_bucket"
            }
    return None


def lag_summary(before: Buckets | None, after: Buckets | None) -> tuple[float, float] | None:
    """(P99, upper bound of the largest) lag in seconds between two reads of the histogram."""
    if before is None or after is None:
        return None
    p99 = window_quantile(0.99, before, after)
    delta = bucket_delta(before, after)
    total = delta.get(math.inf, 0.0)
    if p99 is None or total <= 0:
        return None
    return p99, min(le for le, count in delta.items() if count >= total)


async def leftover(url: str, within: float = 15.0) -> tuple[int, int] | None:
    """(in flight, queued) once both are 0, or as they are after `within` seconds; None if unanswered."""
    deadline = time.monotonic() + within
    async with httpx.AsyncClient(timeout=5) as client:
        while True:
            try:
                state = (await client.get(f"{url}/admin/state")).json()
            except (httpx.HTTPError, ValueError):
                return None
            left = (
                sum(b["inflight"] for b in state["backends"]),
                sum(m["depth"] for m in state["models"].values()),
            )
            if left == (0, 0) or time.monotonic() > deadline:
                return left
            await asyncio.sleep(0.2)
