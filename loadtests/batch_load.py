"""The loads of the batch benchmark: the requests of a 5,000-evaluation job, as batch lines, as a
closed loop straight at the backend, and as an interactive streaming closed loop through the gateway.

The job's requests (Gemma 3 4B on one RTX 4080) are chat completions of about 788 prompt and 308
output tokens. A prompt here is unique (it opens with its run and line number, so no prefix is
shared between requests) and sized for the simulated profile's 4 bytes per token; `ignore_eos`
makes every answer 308 tokens.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import aiohttp
import openai
import orjson
from openai.types import Batch

from gateway.control.window import nearest_rank
from loadtests.streaming import StreamReader

MODEL = "google/gemma-3-4b-it"
CHAT = "/v1/chat/completions"
PROMPT_TOKENS = 788
OUTPUT_TOKENS = 308
BYTES_PER_TOKEN = 4
_TEMPLATE_TOKENS = 7
"""The simulated chat template's tokens for one message (4 per message, 3 base)."""
_WORDS = ("the", "model", "reads", "every", "candidate", "answer", "and", "scores", "it", "against")


def request_body(tag: str, max_tokens: int = OUTPUT_TOKENS) -> dict[str, object]:
    size = (PROMPT_TOKENS - _TEMPLATE_TOKENS) * BYTES_PER_TOKEN
    text = f"[{tag}] " + " ".join(_WORDS[i % len(_WORDS)] for i in range(size))
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": text[:size]}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }


def batch_file(run: str, lines: int, max_tokens: int = OUTPUT_TOKENS) -> Iterator[bytes]:
    """The batch input file of `lines` requests, one JSONL line at a time."""
    for i in range(lines):
        line = {
            "custom_id": f"{run}-{i}",
            "method": "POST",
            "url": CHAT,
            "body": request_body(f"{run} {i}", max_tokens),
        }
        yield orjson.dumps(line) + b"\n"


@dataclass(slots=True)
class Throughput:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    errors: int = 0

    @property
    def tokens_per_s(self) -> float:
        return (self.prompt_tokens + self.completion_tokens) / self.seconds if self.seconds else 0.0

    @property
    def completion_per_s(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds else 0.0


async def direct_closed_loop(
    url: str, run: str, count: int, clients: int, duration: float | None = None
) -> Throughput:
    """`count` requests straight at the backend, `clients` at a time, non-streaming like batch lines;
    with `duration`, only those that finish within it count, over that time."""
    queue = iter(range(count))
    out = Throughput()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def client() -> None:
            for i in queue:
                body = orjson.dumps(request_body(f"{run} {i}"))
                headers = {"content-type": "application/json"}
                async with session.post(url + CHAT, data=body, headers=headers) as resp:
                    payload = orjson.loads(await resp.read())
                if resp.status != 200:
                    out.errors += 1
                    continue
                out.requests += 1
                out.prompt_tokens += payload["usage"]["prompt_tokens"]
                out.completion_tokens += payload["usage"]["completion_tokens"]

        started = time.monotonic()
        clients_done = asyncio.gather(*(client() for _ in range(clients)))
        try:
            await asyncio.wait_for(clients_done, duration)
        except TimeoutError:
            out.seconds = duration or 0.0
        else:
            out.seconds = time.monotonic() - started
    return out


async def run_batch(
    client: openai.AsyncOpenAI, run: str, lines: int, max_tokens: int = OUTPUT_TOKENS
) -> tuple[Throughput, str]:
    """Upload, create, poll until the batch ends; the throughput from create to completed."""
    data = b"".join(batch_file(run, lines, max_tokens))
    file = await client.files.create(file=(f"{run}.jsonl", data), purpose="batch")
    del data
    started = time.monotonic()
    created = await client.batches.create(input_file_id=file.id, endpoint=CHAT, completion_window="24h")
    batch = await poll(
        client, created.id, lambda b: b.status in ("completed", "failed", "cancelled", "expired")
    )
    seconds = time.monotonic() - started
    counts, usage = batch.request_counts, batch.usage
    assert counts is not None and usage is not None
    out = Throughput(counts.completed, usage.input_tokens, usage.output_tokens, seconds, counts.failed)
    return out, batch.status


async def poll(client: openai.AsyncOpenAI, batch_id: str, done: Callable[[Batch], bool]) -> Batch:
    """The batch, retrieved every 0.2 s until `done` says so."""
    while True:
        batch = await client.batches.retrieve(batch_id)
        if done(batch):
            return batch
        await asyncio.sleep(0.2)  # the server has no push: it is asked again


@dataclass(slots=True)
class Interactive:
    ttfts: list[float] = field(default_factory=list)
    completion_tokens: int = 0
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0

    @property
    def ttft_p90(self) -> float | None:
        return nearest_rank(sorted(self.ttfts), 0.9)

    @property
    def completion_per_s(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds else 0.0


async def interactive_loop(url: str, run: str, users: int, stop: asyncio.Event) -> Interactive:
    """`users` streaming clients through the gateway, each sending its next request when its last
    ends, until `stop`; requests still open then are not counted."""
    out = Interactive()
    counter = iter(range(1 << 30))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def user() -> None:
            while not stop.is_set():
                body = {**request_body(f"{run} interactive {next(counter)}"), "stream": True}
                body["stream_options"] = {"include_usage": True}
                started = time.monotonic()
                reader = StreamReader(started)
                async with session.post(
                    url + CHAT, data=orjson.dumps(body), headers={"content-type": "application/json"}
                ) as resp:
                    async for line in resp.content:
                        reader.feed(line, time.monotonic())
                timings = reader.timings(time.monotonic())
                if resp.status != 200 or reader.error or timings.ttft is None:
                    out.errors += 1
                    continue
                out.requests += 1
                out.ttfts.append(timings.ttft)
                out.completion_tokens += timings.output_tokens

        started = time.monotonic()
        users_done = [asyncio.create_task(user()) for _ in range(users)]
        await stop.wait()
        out.seconds = time.monotonic() - started
        for task in users_done:
            task.cancel()
        await asyncio.gather(*users_done, return_exceptions=True)
    return out
