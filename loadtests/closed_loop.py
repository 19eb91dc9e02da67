"""Closed-loop streaming load against an OpenAI-compatible server, with engine sampling.

N clients each send one streaming `/v1/completions` request at a time and send the next as
soon as the previous one ends, for a fixed duration; requests still running at the end are
allowed to finish. Prompts are distinct strings of random digits: the tiny model's byte-level
tokenizer has no digit merges, so a prompt of k digits is k tokens, and distinct first
tokens keep vLLM's prefix cache from sharing blocks between requests.

Measured per request: time to first token as the client sees it, the time of the last
token, and the token counts from the final `usage` chunk. Chunk arrival times are not used
as token times: when its front end falls behind, vLLM merges several tokens into one chunk.
Throughput spreads each request's `usage` tokens evenly between its first and last token
and counts what falls in the steady window (after a warm-up, until the clients stop
sending). While the load runs, the engine's own `/metrics` are sampled (waiting, running,
KV usage, preemptions) and its TTFT and inter-token histograms are differenced over the
steady window (from the end of the warm-up until every request has ended).

Needs aiohttp and the gateway package (the project's environment).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from dataclasses import dataclass

import aiohttp

from gateway.histogram import window_quantile
from gateway.window import nearest_rank

SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LE_RE = re.compile(r'le="([^"]+)"')
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"


@dataclass(frozen=True)
class Workload:
    clients: int
    duration_s: float
    model: str = "tiny-llama"
    prompt_tokens: int = 232
    max_tokens: int = 300
    warmup_s: float = 3.0
    seed: int = 7
    request_timeout_s: float = 300.0


@dataclass
class RequestRecord:
    start: float
    first_token: float | None = None
    last_token: float | None = None
    end: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    status: int = 0
    error: str = ""


@dataclass
class EngineSample:
    at: float
    waiting: float
    running: float
    kv_usage: float
    preemptions: float


@dataclass
class RunResult:
    workload: Workload
    started: float
    stopped: float
    records: list[RequestRecord]
    samples: list[EngineSample]
    engine_ttft_p90_s: float | None
    engine_itl_p90_s: float | None

    @property
    def ok(self) -> list[RequestRecord]:
        return [r for r in self.records if r.status == 200 and not r.error]

    @property
    def failures(self) -> int:
        return len(self.records) - len(self.ok)

    def window(self) -> tuple[float, float]:
        begin = self.started + self.workload.warmup_s
        return begin, max(begin + 1e-9, self.stopped)

    def tokens_per_s(self) -> float:
        """Generated tokens per second in the steady window (clients all busy)."""
        begin, end = self.window()
        total = 0.0
        for r in self.ok:
            if r.first_token is None or r.last_token is None:
                continue
            span = r.last_token - r.first_token
            if span <= 0:
                total += r.completion_tokens if begin <= r.first_token < end else 0
                continue
            overlap = min(end, r.last_token) - max(begin, r.first_token)
            total += r.completion_tokens * max(0.0, overlap) / span
        return total / (end - begin)

    def usage_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.ok)

    def ttft_p90_s(self) -> float:
        return percentile([r.first_token - r.start for r in self.ok if r.first_token], 0.9)

    def tpot_p90_s(self) -> float:
        """P90 over requests of the mean gap between tokens as the client saw them."""
        return percentile(
            [
                (r.last_token - r.first_token) / (r.completion_tokens - 1)
                for r in self.ok
                if r.first_token and r.last_token and r.completion_tokens > 1
            ],
            0.9,
        )

    def preemptions(self) -> float:
        if len(self.samples) < 2:
            return float("nan")
        return self.samples[-1].preemptions - self.samples[0].preemptions

    def peak_waiting(self) -> float:
        return max((s.waiting for s in self.samples), default=float("nan"))

    def mean_waiting(self) -> float:
        begin, end = self.window()
        steady = [s.waiting for s in self.samples if begin <= s.at < end]
        return sum(steady) / len(steady) if steady else float("nan")

    def peak_kv_usage(self) -> float:
        return max((s.kv_usage for s in self.samples), default=float("nan"))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (the gateway's definition); NaN for no values."""
    value = nearest_rank(sorted(values), q)
    return float("nan") if value is None else value


def parse_metrics(text: str) -> dict[str, list[tuple[str, float]]]:
    """Prometheus text format to {name: [(labels, value), ...]}."""
    out: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        match = SAMPLE_RE.match(line)
        if match:
            name, labels, value = match.groups()
            out.setdefault(name, []).append((labels or "", float(value)))
    return out


def metric_value(metrics: dict[str, list[tuple[str, float]]], name: str) -> float:
    return sum(value for _, value in metrics.get(name, []))


def histogram_buckets(metrics: dict[str, list[tuple[str, float]]], name: str) -> dict[float, float]:
    buckets: dict[float, float] = {}
    for labels, value in metrics.get(name + "_bucket", []):
        le = LE_RE.search(labels)
        if le:
            bound = float(le.group(1))
            buckets[bound] = buckets.get(bound, 0.0) + value
    return buckets


def histogram_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """Quantile of the observations added between two scrapes, interpolated in the bucket as
    Prometheus' histogram_quantile does (the gateway's own implementation); NaN when none."""
    value = window_quantile(q, before, after)
    return float("nan") if value is None else value


def prompt(rng: random.Random, tokens: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(tokens))


async def _one_request(
    session: aiohttp.ClientSession, url: str, workload: Workload, text: str
) -> RequestRecord:
    body = {
        "model": workload.model,
        "prompt": text,
        "max_tokens": workload.max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    record = RequestRecord(start=time.monotonic())
    try:
        async with session.post(url + "/v1/completions", json=body) as response:
            record.status = response.status
            if response.status != 200:
                record.error = (await response.text())[:200]
                return record
            async for raw in response.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    record.error = str(chunk["error"])[:200]
                    break
                now = time.monotonic()
                if chunk.get("choices"):
                    if record.first_token is None:
                        record.first_token = now
                    record.last_token = now
                usage = chunk.get("usage")
                if usage:
                    record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                    record.completion_tokens = int(usage.get("completion_tokens") or 0)
    except (aiohttp.ClientError, TimeoutError) as error:
        record.error = f"{type(error).__name__}: {error}"
    finally:
        record.end = time.monotonic()
    return record


async def scrape(session: aiohttp.ClientSession, metrics_url: str) -> dict[str, list[tuple[str, float]]]:
    async with session.get(metrics_url) as response:
        return parse_metrics(await response.text())


async def _scrape_after(
    session: aiohttp.ClientSession, metrics_url: str, delay_s: float
) -> dict[str, list[tuple[str, float]]]:
    await asyncio.sleep(delay_s)
    return await scrape(session, metrics_url)


async def _sampler(
    session: aiohttp.ClientSession,
    metrics_url: str,
    samples: list[EngineSample],
    stop: asyncio.Event,
    interval_s: float,
) -> None:
    while True:
        try:
            metrics = await scrape(session, metrics_url)
            samples.append(
                EngineSample(
                    at=time.monotonic(),
                    waiting=metric_value(metrics, "vllm:num_requests_waiting"),
                    running=metric_value(metrics, "vllm:num_requests_running"),
                    kv_usage=metric_value(metrics, "vllm:kv_cache_usage_perc"),
                    preemptions=metric_value(metrics, "vllm:num_preemptions_total"),
                )
            )
        except aiohttp.ClientError:
            pass
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
            return
        except TimeoutError:
            continue


async def run(
    base_url: str,
    workload: Workload,
    *,
    engine_url: str | None = None,
    sample_interval_s: float = 0.5,
) -> RunResult:
    """Drive the closed loop against base_url; sample the engine at engine_url if given."""
    rng = random.Random(workload.seed)
    timeout = aiohttp.ClientTimeout(total=workload.request_timeout_s)
    connector = aiohttp.TCPConnector(limit=workload.clients + 4)
    records: list[RequestRecord] = []
    samples: list[EngineSample] = []
    stop_sampling = asyncio.Event()
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        metrics_url = engine_url + "/metrics" if engine_url else None
        sampler = None
        if metrics_url:
            sampler = asyncio.create_task(
                _sampler(session, metrics_url, samples, stop_sampling, sample_interval_s)
            )
        started = time.monotonic()
        deadline = started + workload.duration_s
        # The engine's histograms are differenced over the steady window only, as throughput is.
        before_task = (
            asyncio.create_task(_scrape_after(session, metrics_url, workload.warmup_s))
            if metrics_url
            else None
        )

        async def client() -> None:
            while time.monotonic() < deadline:
                records.append(
                    await _one_request(session, base_url, workload, prompt(rng, workload.prompt_tokens))
                )

        await asyncio.gather(*(client() for _ in range(workload.clients)))
        stopped = time.monotonic()
        engine_ttft_p90 = engine_itl_p90 = None
        if metrics_url and sampler is not None and before_task is not None:
            after = await scrape(session, metrics_url)
            before = await before_task
            stop_sampling.set()
            await sampler
            engine_ttft_p90 = histogram_quantile(
                histogram_buckets(before, TTFT), histogram_buckets(after, TTFT), 0.9
            )
            engine_itl_p90 = histogram_quantile(
                histogram_buckets(before, ITL), histogram_buckets(after, ITL), 0.9
            )
    return RunResult(
        workload=workload,
        started=started,
        stopped=min(stopped, deadline),
        records=records,
        samples=samples,
        engine_ttft_p90_s=engine_ttft_p90,
        engine_itl_p90_s=engine_itl_p90,
    )


def summary(name: str, result: RunResult) -> dict[str, float | str]:
    return {
        "target": name,
        "clients": result.workload.clients,
        "requests": len(result.ok),
        "failures": result.failures,
        "tok_per_s": round(result.tokens_per_s(), 1),
        "usage_tokens": result.usage_tokens(),
        "ttft_p90_s": round(result.ttft_p90_s(), 3),
        "engine_ttft_p90_s": round(result.engine_ttft_p90_s or float("nan"), 3),
        "engine_itl_p90_s": round(result.engine_itl_p90_s or float("nan"), 4),
        "tpot_p90_s": round(result.tpot_p90_s(), 4),
        "preemptions": result.preemptions(),
        "peak_waiting": result.peak_waiting(),
        "mean_waiting": round(result.mean_waiting(), 2),
        "peak_kv": round(result.peak_kv_usage(), 3),
    }


def run_sync(base_url: str, workload: Workload, *, engine_url: str | None = None) -> RunResult:
    """`run` on a fresh event loop, for callers that are not async."""
    return asyncio.run(run(base_url, workload, engine_url=engine_url))
