"""A cold burst against `llm-gateway serve` with default settings: is every request served in the end?

Starts simulated vLLM backends and the gateway (only the backends configured, everything else at its
default), then sends `--requests` chat completions at once with the OpenAI SDK (aiohttp transport,
default retries; `loadtests.burst`). Prints, per run: requests served, attempts, the Retry-After
advice the refusals carried (median and largest), how many were told `x-should-retry: false`, the
wall time, and the queue's drain rate and leftovers afterwards. A fresh gateway per run, so every
burst is cold.

    .venv/bin/python -m loadtests.bench_burst [--requests 5000] [--runs 1] [--max-queue N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

import httpx

from loadtests.burst import sdk_burst
from tests.procs import spawn_gateway, spawn_sim


def gateway_config(sims: list[str], max_queue: int | None) -> dict[str, object]:
    config: dict[str, object] = {"backends": sims}
    if max_queue is not None:
        config["queue"] = {"max_depth": max_queue}
    return config


def leftovers(url: str) -> dict[str, object]:
    state = httpx.get(f"{url}/admin/state", timeout=10).json()
    models = state["models"]
    return {
        "inflight": sum(b["inflight"] for b in state["backends"]),
        "queued": sum(m["depth"] for m in models.values()),
        "limits": [b["limit"] for b in state["backends"]],
        "drain_rate": [m["drain_rate"] for m in models.values()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--backends", type=int, default=2)
    parser.add_argument("--profile", default="gemma3-4b-rtx4080")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-queue", type=int, default=None, help="queue.max_depth (default: default)")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        sims = [
            stack.enter_context(spawn_sim("--profile", args.profile, "--seed", str(i + 1)))
            for i in range(args.backends)
        ]
        model = httpx.get(f"{sims[0].url}/v1/models").json()["data"][0]["id"]
        print(
            f"burst of {args.requests} SDK requests (default retries) at {args.backends} x "
            f"{args.profile}, max_tokens {args.max_tokens}, queue.max_depth "
            f"{args.max_queue or 'default'}"
        )
        for run in range(args.runs):
            with spawn_gateway(gateway_config([s.url for s in sims], args.max_queue)) as gw:
                result = asyncio.run(sdk_burst(gw.url, args.requests, model, max_tokens=args.max_tokens))
                print(f"run {run + 1}: {result.summary()}")
                print(f"  after: {leftovers(gw.url)}")


if __name__ == "__main__":
    main()
