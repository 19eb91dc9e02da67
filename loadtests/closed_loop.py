"""Closed-loop load against an OpenAI-compatible server: the one load generator of the real-engine
benchmarks.

N clients each send one request at a time and send the next as soon as the previous one ends, until
the warm-up and the steady window are over. Given several base URLs (replicas of one gateway),
client i sends to URL i mod n, so the same load is spread evenly over them. A request is
`/v1/completions` or `/v1/chat/completions`, streaming (with the final `usage` chunk) or not, with
`ignore_eos` so that it generates exactly its `max_tokens`. Prompts are random digits: the tiny
engine's byte-level tokenizer has no digit merges, so k digits are k tokens, and distinct leading
digits keep vLLM's prefix cache from sharing blocks between requests; a workload with a shared
prefix starts every prompt with the same digits, which the cache does share. Lengths are drawn
uniformly from the workload's ranges, and `max_tokens` is cut so that prompt plus output fits the
engine's `max_model_len` (a request beyond it is refused with a 400).

When the window ends, requests that are not yet generating (no first token, or not streaming)
are cancelled at once: none of their tokens can fall in the window. Streams already generating
get up to `drain_s` to finish, so that their tokens are counted exactly from `usage`; whatever
is left then is cancelled. Closing the connection makes vLLM (and the gateway) abort the request.

Recorded per request: start, first and last token, end, tokens from `usage`, status, and the wait
in a gateway's queue (`x-gateway-queue-wait`). The client's own CPU time over the run is recorded
too: it must stay well under one core, or the client would be what limits the measurement.
Throughput, goodput and P90s are computed from the records by loadtests.goodput.
"""

from __future__ import annotations

import asyncio
import random
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from loadtests import goodput
from loadtests.engine_metrics import EngineSample, EngineWatch
from loadtests.stats import p90
from loadtests.streaming import StreamReader

TEMPLATE_MARGIN = 32
"""Tokens kept free under max_model_len for the BOS token and the chat template's role markers."""


@dataclass(frozen=True)
class Workload:
    clients: int
    duration_s: float
    """Total load time: the warm-up plus the steady window."""
    model: str = "tiny-llama"
    endpoint: str = "completions"
    stream: bool = True
    prompt_tokens: tuple[int, int] = (232, 232)
    output_tokens: tuple[int, int] = (300, 300)
    shared_prefix_tokens: int = 0
    max_model_len: int | None = None
    warmup_s: float = 3.0
    drain_s: float = 300.0
    seed: int = 7
    request_timeout_s: float = 300.0


@dataclass
class RequestRecord:
    stream: bool
    start: float
    first_token: float | None = None
    last_token: float | None = None
    end: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    max_tokens: int = 0
    status: int = 0
    error: str = ""
    queue_wait: float = 0.0
    finished: bool = False


@dataclass
class RunResult:
    workload: Workload
    started: float
    stopped: float
    """When the clients stopped sending: the end of the steady window."""
    records: list[RequestRecord]
    samples: list[EngineSample] = field(default_factory=list)
    engine_ttft_p90_s: float | None = None
    engine_itl_p90_s: float | None = None
    cpu_s: float = 0.0
    """CPU time (user + system) this process spent over the run."""
    wall_s: float = 0.0

    @property
    def ok(self) -> list[RequestRecord]:
        return [r for r in self.records if goodput.ok(r)]

    @property
    def failures(self) -> int:
        """Requests answered with an error (cancelled requests are not failures)."""
        return sum(1 for r in self.records if r.status not in (0, 200) or (r.error and r.finished))

    def window(self) -> tuple[float, float]:
        begin = self.started + self.workload.warmup_s
        return begin, max(begin + 1e-9, self.stopped)

    def tokens_per_s(self, targets: dict[str, float] | None = None) -> float:
        return goodput.tokens_per_s(self.records, *self.window(), targets)

    def p90s(self) -> dict[str, float]:
        return goodput.p90s(self.records, *self.window())

    def cpu_share(self) -> float:
        """The client's CPU time as a share of one core over the run."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else float("nan")

    def usage_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.ok)

    def ttft_p90_s(self) -> float:
        """Client-side TTFT P90 (queue included), over all finished requests."""
        return _or_nan(p90(r.first_token - r.start for r in self.ok if r.first_token))

    def tpot_p90_s(self) -> float:
        return _or_nan(p90(goodput.latencies(r).get("tpot") for r in self.ok))

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


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def digits(rng: random.Random, tokens: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(tokens))


def request_body(workload: Workload, rng: random.Random, prefix: str) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of one request drawn from the workload."""
    length = rng.randint(*workload.prompt_tokens)
    shared = prefix[: min(length, len(prefix))]
    text = shared + digits(rng, length - len(shared))
    max_tokens = rng.randint(*workload.output_tokens)
    if workload.max_model_len is not None:
        max_tokens = max(1, min(max_tokens, workload.max_model_len - length - TEMPLATE_MARGIN))
    body: dict[str, Any] = {
        "model": workload.model,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": workload.stream,
    }
    if workload.stream:
        body["stream_options"] = {"include_usage": True}
    if workload.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": text}]
        return "/v1/chat/completions", body
    body["prompt"] = text
    return "/v1/completions", body


def _usage(record: RequestRecord, usage: dict[str, Any] | None) -> None:
    if usage:
        record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        record.completion_tokens = int(usage.get("completion_tokens") or 0)


async def _send(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], record: RequestRecord
) -> None:
    async with session.post(url, json=body) as response:
        record.status = response.status
        record.queue_wait = float(response.headers.get("x-gateway-queue-wait", 0.0))
        if response.status != 200:
            record.error = (await response.text())[:200]
            return
        if not record.stream:
            data = await response.json()
            _usage(record, data.get("usage"))
            return
        reader = StreamReader(record.start)
        async for raw in response.content:
            reader.feed(raw, time.monotonic())
            record.first_token, record.last_token = reader.first_token_at, reader.last_token_at
            if reader.error:
                record.error = reader.error[:200]
                return
            if reader.done:
                break
        _usage(record, reader.usage)


async def one_request(
    session: aiohttp.ClientSession, base_url: str, path: str, body: dict[str, Any], record: RequestRecord
) -> None:
    """Send one request and fill `record` in as it progresses."""
    try:
        await _send(session, base_url + path, body, record)
        record.finished = True
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        record.error = f"{type(error).__name__}: {error}"[:200]
        record.finished = True
    except asyncio.CancelledError:
        record.error = "cancelled when the window ended"
        raise
    finally:
        record.end = time.monotonic()


async def _stop(inflight: dict[asyncio.Task[None], RequestRecord], drain_s: float) -> None:
    """Cancel what cannot deliver tokens in the window; let generating streams finish."""
    for task, record in list(inflight.items()):
        if not (record.stream and record.first_token is not None):
            task.cancel()
    tasks = list(inflight)
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=drain_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run(
    base_url: str | Sequence[str], workload: Workload, *, engine_url: str | None = None
) -> RunResult:
    """Drive the closed loop against base_url (or spread over several); sample the engine at
    engine_url if given."""
    urls = [base_url] if isinstance(base_url, str) else list(base_url)
    rng = random.Random(workload.seed)
    prefix = digits(random.Random(workload.seed + 1), workload.shared_prefix_tokens)
    timeout = aiohttp.ClientTimeout(total=workload.request_timeout_s)
    connector = aiohttp.TCPConnector(limit=workload.clients + 4)
    records: list[RequestRecord] = []
    inflight: dict[asyncio.Task[None], RequestRecord] = {}
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        watch = EngineWatch(session, engine_url) if engine_url else None
        started = time.monotonic()
        deadline = started + workload.duration_s
        if watch is not None:
            watch.start(workload.warmup_s)
        stopping = asyncio.Event()

        async def client(base_url: str) -> None:
            while time.monotonic() < deadline and not stopping.is_set():
                path, body = request_body(workload, rng, prefix)
                record = RequestRecord(workload.stream, time.monotonic(), max_tokens=body["max_tokens"])
                records.append(record)
                task = asyncio.create_task(one_request(session, base_url, path, body, record))
                inflight[task] = record
                try:
                    await asyncio.shield(task)
                except asyncio.CancelledError:
                    return
                finally:
                    inflight.pop(task, None)

        clients = [asyncio.create_task(client(urls[i % len(urls)])) for i in range(workload.clients)]
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        stopping.set()
        stopped = time.monotonic()
        await _stop(dict(inflight), workload.drain_s)
        await asyncio.gather(*clients, return_exceptions=True)
        result = RunResult(workload, started, stopped, records)
        if watch is not None:
            result.engine_ttft_p90_s, result.engine_itl_p90_s = await watch.finish()
            result.samples = watch.samples
    usage_after = resource.getrusage(resource.RUSAGE_SELF)
    result.cpu_s = usage_after.ru_utime - usage_before.ru_utime + usage_after.ru_stime - usage_before.ru_stime
    result.wall_s = time.monotonic() - started
    return result


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
        "client_cpu": round(result.cpu_share(), 3),
    }


def run_sync(
    base_url: str | Sequence[str], workload: Workload, *, engine_url: str | None = None
) -> RunResult:
    """`run` on a fresh event loop, for callers that are not async."""
    return asyncio.run(run(base_url, workload, engine_url=engine_url))
