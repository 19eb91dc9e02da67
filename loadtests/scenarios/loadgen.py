"""Load generator: streaming chat requests in closed-loop, open-loop (Poisson) and burst modes.

Each logical request is what one user asked for; like the OpenAI Python SDK it may be retried
(at most `max_retries` times) after a 408/409/429/5xx answer or a connection error, unless the server
says `x-should-retry: false`. The wait before a retry is the server's `retry-after-ms` or
`retry-after` when `honour_retry_after` is set (what the SDK does, up to 60 s), else the SDK's own
exponential back-off (0.5 s doubling, at most 8 s, with jitter). Latencies are measured from the
user's first attempt, so the time spent being shed and retrying counts against the SLA.

Every loop is bounded: by its duration, by `max_requests`, by a per-request timeout, and at the end
by a drain time after which whatever is still open is cancelled (recorded as `unfinished`). The
timeout is the user's whole budget: a request with no answer within it is a `timeout` error, while a
shed request told to retry after its budget ends gives up at once and stays `shed`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import string
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from loadtests.lengths import Lengths
from loadtests.retry_after import retry_after_seconds
from loadtests.streaming import StreamReader

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
SDK_MAX_RETRY_WAIT = 60.0
_ALPHABET = string.ascii_lowercase + "      "


@dataclass(frozen=True, slots=True)
class Workload:
    """What one stream of users sends: lengths, tenant key and optional per-request headers."""

    prompt: Lengths
    output: Lengths
    tenant: str = "default"
    api_key: str | None = None
    priority: int | None = None
    queue_timeout: float | None = None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 2
    honour_retry_after: bool = True


@dataclass(slots=True)
class Record:
    """The outcome of one logical request (after its retries), times relative to the run start."""

    tenant: str
    arrival: float
    outcome: str = "unfinished"
    """ok | shed | error | timeout | unfinished"""
    status: int = 0
    ttft: float | None = None
    attempt_ttft: float | None = None
    """First token after the start of the answered attempt (what the gateway admitted)."""
    attempt_at: float | None = None
    """When the answered attempt was sent: the time the gateway admitted this request's work."""
    tpot: float | None = None
    e2e: float | None = None
    output_tokens: int = 0
    prompt_tokens: int | None = None
    shed_reason: str | None = None
    retry_after: float | None = None
    """The server's advised wait on the last shed answer (None: it gave none)."""
    attempts: int = 0
    error: str | None = None


@dataclass(slots=True)
class LoadGen:
    """Sends requests round-robin over `urls` (several: straight to the backends; one: a gateway)."""

    urls: Sequence[str]
    model: str
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    request_timeout: float = 30.0
    max_requests: int = 20_000
    seed: int = 0
    clock: Callable[[], float] = time.perf_counter
    records: list[Record] = field(default_factory=list)
    started: float = 0.0
    _rng: random.Random = field(init=False)
    _next_url: itertools.cycle[str] = field(init=False)
    _session: aiohttp.ClientSession | None = field(default=None, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._next_url = itertools.cycle(self.urls)

    async def __aenter__(self) -> LoadGen:
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        self._session = aiohttp.ClientSession(connector=connector)
        self.started = self.clock()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cancel_open()
        if self._session is not None:
            await self._session.close()

    def now(self) -> float:
        return self.clock() - self.started

    # --- modes ---

    def launch(self, workload: Workload) -> bool:
        """Start one request in the background; False once `max_requests` is reached."""
        if len(self.records) >= self.max_requests:
            return False
        record = Record(tenant=workload.tenant, arrival=self.now())
        self.records.append(record)
        task = asyncio.create_task(self._request(workload, record))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def open_loop(self, workload: Workload, rate: float, until: float) -> None:
        """Poisson arrivals at `rate` per second until run time `until`."""
        rng = random.Random(self._rng.random())
        at = self.now()
        while True:
            at += rng.expovariate(rate)
            if at >= until:
                return
            delay = at - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            if not self.launch(workload):
                return

    async def closed_loop(self, workload: Workload, users: int, until: float) -> None:
        """`users` users, each sending its next request when the previous one is answered."""

        async def user() -> None:
            while self.now() < until and len(self.records) < self.max_requests:
                record = Record(tenant=workload.tenant, arrival=self.now())
                self.records.append(record)
                await self._request(workload, record)

        await asyncio.gather(*(user() for _ in range(users)))

    def burst(self, workload: Workload, count: int) -> None:
        for _ in range(count):
            if not self.launch(workload):
                return

    async def drain(self, grace: float) -> None:
        """Wait up to `grace` s for open requests, then cancel the rest (left `unfinished`)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace)
        await self.cancel_open()

    async def cancel_open(self) -> None:
        tasks = set(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # --- one request ---

    def _body(self, workload: Workload) -> bytes:
        prompt_len = workload.prompt.sample(self._rng)
        # Random letters: no two prompts share a prefix, so the engine's prefix cache cannot help.
        text = "".join(self._rng.choices(_ALPHABET, k=prompt_len))
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": workload.output.sample(self._rng),
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
        return json.dumps(body).encode()

    def _headers(self, workload: Workload) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if workload.api_key:
            headers["authorization"] = f"Bearer {workload.api_key}"
        if workload.priority is not None:
            headers["x-priority"] = str(workload.priority)
        if workload.queue_timeout is not None:
            headers["x-queue-timeout"] = str(workload.queue_timeout)
        return headers

    async def _request(self, workload: Workload, record: Record) -> None:
        body, headers = self._body(workload), self._headers(workload)
        start = self.clock()
        deadline = start + self.request_timeout
        try:
            async with asyncio.timeout(self.request_timeout):
                for attempt in range(self.retry.max_retries + 1):
                    record.attempts = attempt + 1
                    wait = await self._attempt(body, headers, start, record)
                    if wait is None or attempt == self.retry.max_retries:
                        return
                    if self.clock() + wait >= deadline:
                        return  # told to come back after the client's own deadline: it gives up
                    await asyncio.sleep(wait)
        except TimeoutError:
            record.outcome, record.error = "timeout", f"no answer within {self.request_timeout} s"

    async def _attempt(
        self, body: bytes, headers: dict[str, str], start: float, record: Record
    ) -> float | None:
        """One HTTP attempt; fills `record`; returns the wait before a retry, None when final."""
        assert self._session is not None
        url = f"{next(self._next_url)}/v1/chat/completions"
        record.status = 0
        sent = self.clock()
        try:
            async with self._session.post(url, data=body, headers=headers) as resp:
                record.status = resp.status
                if resp.status == 200:
                    await self._read_stream(resp, start, sent, record)
                    return None
                payload = await resp.read()
                self._fill_refusal(resp.status, resp.headers, payload, record)
                should = resp.headers.get("x-should-retry")
                retry = resp.status in RETRY_STATUSES if should is None else should == "true"
                advised = retry_after_seconds(resp.headers)
        except (aiohttp.ClientError, ConnectionError) as exc:
            # Cut mid-stream (status 200 seen): the SDK does not retry a stream it began to read.
            retry, advised = record.status != 200, None
            record.outcome, record.error = "error", type(exc).__name__
        if not retry:
            return None
        if self.retry.honour_retry_after and advised is not None:
            return min(advised, SDK_MAX_RETRY_WAIT)
        backoff = min(0.5 * 2 ** (record.attempts - 1), 8.0)
        return backoff * (1 - 0.25 * self._rng.random())

    @staticmethod
    def _fill_refusal(status: int, headers: Mapping[str, str], payload: bytes, record: Record) -> None:
        code: str | None = None
        try:
            err = json.loads(payload).get("error", {})
            code = str(err.get("code")) if isinstance(err, dict) else None
        except (ValueError, AttributeError):
            pass
        record.retry_after = retry_after_seconds(headers)
        if status in (429, 503) and code is not None and not code.isdigit():
            record.outcome, record.shed_reason = "shed", code
        else:
            record.outcome, record.error = "error", f"HTTP {status} {code or ''}".strip()

    async def _read_stream(
        self, resp: aiohttp.ClientResponse, start: float, sent: float, record: Record
    ) -> None:
        reader = StreamReader(start)
        async for line in resp.content:
            reader.feed(line, self.clock())
        t = reader.timings(self.clock())
        record.ttft, record.tpot, record.e2e = t.ttft, t.tpot, t.e2e
        record.attempt_at = sent - self.started
        if reader.first_token_at is not None:
            record.attempt_ttft = reader.first_token_at - sent
        record.output_tokens, record.prompt_tokens = t.output_tokens, t.prompt_tokens
        if reader.error is not None or not reader.done:
            record.outcome = "error"
            record.error = reader.error or "stream ended without [DONE]"
        else:
            record.outcome, record.shed_reason, record.error = "ok", None, None
