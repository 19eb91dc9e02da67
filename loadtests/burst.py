"""A cold burst of concurrent OpenAI SDK requests, every one retried as the SDK does by default.

`sdk_burst(base_url, n, model)` builds `n` chat completions with the official async SDK over its
aiohttp transport, one connection per request (aiohttp would otherwise cap them at 100), with the
default retries (two, honouring `retry-after-ms`, `retry-after` and `x-should-retry`). It holds
every first attempt until all `n` are built, then lets them go at once. A response hook records
every attempt: its status and the retry advice it carried. The result says how many requests were
served in the end, how many attempts that took, what the refusals advised, and how long it took.
Run as a module it sends one burst and prints that summary as JSON (for a benchmark that must not
share its event loop with 5,000 clients).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx2
import openai

from gateway.control.window import nearest_rank


@dataclass(slots=True)
class BurstResult:
    requests: int
    served: int = 0
    attempts: int = 0
    seconds: float = 0.0
    """From the moment every first attempt was let go until the last request ended."""
    statuses: Counter[int] = field(default_factory=Counter)
    """Status of every attempt."""
    failures: Counter[str] = field(default_factory=Counter)
    """Final error per request that was not served: exception class and error code."""
    retry_after: list[float] = field(default_factory=list)
    """Seconds advised by each refusal (retry-after-ms, else retry-after)."""
    told_not_to_retry: int = 0
    """Refusals that carried `x-should-retry: false`."""
    done_at: list[float] = field(default_factory=list)
    """Seconds from the start of the burst until each served request finished."""

    def summary(self) -> dict[str, object]:
        advice = sorted(self.retry_after)
        done = sorted(self.done_at)
        return {
            "requests": self.requests,
            "served": self.served,
            "attempts": self.attempts,
            "seconds": round(self.seconds, 2),
            "statuses": dict(sorted(self.statuses.items())),
            "failures": dict(self.failures.most_common()),
            "retry_after_p50": _rounded(nearest_rank(advice, 0.5)),
            "retry_after_max": _rounded(advice[-1] if advice else None),
            "should_retry_false": self.told_not_to_retry,
            "served_p50_s": _rounded(nearest_rank(done, 0.5)),
            "served_p99_s": _rounded(nearest_rank(done, 0.99)),
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _advice(headers: httpx2.Headers) -> float | None:
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return float(value) / scale
            except ValueError:
                continue
    return None


class _Hooks:
    """The SDK client's event hooks: every first attempt is held until all `n` are built, and every
    attempt's status and retry advice go into `result`."""

    def __init__(self, n: int, result: BurstResult) -> None:
        self._n = n
        self._result = result
        self._gate = asyncio.Event()
        self._waiting = 0
        self.start = math.inf
        """When every first attempt was let go."""

    async def on_request(self, request: httpx2.Request) -> None:
        # Every first attempt waits here until all n are built, so the burst lands at once
        # instead of trickling out at the pace the client can build SDK requests.
        if not self._gate.is_set():
            self._waiting += 1
            if self._waiting == self._n:
                self.start = time.monotonic()
                self._gate.set()
            await self._gate.wait()

    async def on_response(self, response: httpx2.Response) -> None:
        result = self._result
        result.attempts += 1
        result.statuses[response.status_code] += 1
        if response.status_code in (429, 503):
            advice = _advice(response.headers)
            if advice is not None:
                result.retry_after.append(advice)
            if response.headers.get("x-should-retry") == "false":
                result.told_not_to_retry += 1


async def sdk_burst(
    base_url: str,
    n: int,
    model: str,
    *,
    max_tokens: int = 16,
    api_key: str = "unused",
    request_timeout: float = 600.0,
) -> BurstResult:
    """Send `n` chat completions at once through one SDK client with its default retries."""
    result = BurstResult(requests=n)
    hooks = _Hooks(n, result)
    http = openai.DefaultAioHttpClient(
        limits=httpx2.Limits(max_connections=n, max_keepalive_connections=n),
        event_hooks={"request": [hooks.on_request], "response": [hooks.on_response]},
        timeout=request_timeout,
    )
    client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key=api_key, http_client=http)

    async def one(i: int) -> None:
        try:
            await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": f"burst request {i}"}],
                max_tokens=max_tokens,
            )
        except openai.APIStatusError as exc:
            result.failures[f"{type(exc).__name__}:{exc.code}"] += 1
        except openai.APIError as exc:
            result.failures[type(exc).__name__] += 1
        else:
            result.served += 1
            result.done_at.append(time.monotonic() - hooks.start)

    try:
        await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        result.seconds = time.monotonic() - hooks.start
        await client.close()
    return result


def main() -> None:
    """`python -m loadtests.burst URL MODEL [--requests N]`: one burst, its summary as JSON."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("url", help="the gateway's base URL")
    parser.add_argument("model")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    result = asyncio.run(sdk_burst(args.url, args.requests, args.model, max_tokens=args.max_tokens))
    print(json.dumps(result.summary()))


if __name__ == "__main__":
    main()
