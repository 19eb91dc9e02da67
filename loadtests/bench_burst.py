"""A cold burst against `llm-gateway serve` with default settings: is every request served in the end?

Starts simulated vLLM backends, then for each run a fresh gateway (so every burst is cold) with only
the backends configured, and sends `--requests` chat completions at once with the OpenAI SDK
(aiohttp transport, default retries; `loadtests.burst`). Prints per run: requests served, attempts,
the Retry-After the refusals carried (median and largest), how many were told `x-should-retry:
false`, the wall time, and what the queue holds afterwards. With `--compare PATH` the gateway of
another checkout runs too, the two interleaved (A B A B ...), and a table of medians ends the run.

    .venv/bin/python -m loadtests.bench_burst [--requests 5000] [--runs 3] [--compare /work/main]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

import httpx
import yaml

from loadtests.burst import sdk_burst
from tests.procs import ROOT, Proc, free_port, spawn, spawn_sim

COLUMNS = ("served", "attempts", "seconds", "retry_after_p50", "retry_after_max", "should_retry_false")


def spawn_gateway_from(checkout: Path, config: dict[str, object]) -> Proc:
    """`llm-gateway serve` of the gateway package in `checkout`, on a free loopback port."""
    port = free_port()
    fd, path = tempfile.mkstemp(suffix=".yaml", prefix="burst-")
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump({**config, "listen": {"host": "127.0.0.1", "port": port}}, f)
    serve = [sys.executable, "-m", "gateway.cli", "serve", "--config", path, "--log-level", "warning"]
    # `python -m` looks in the working directory first, so the checkout's own package runs.
    cmd = ["sh", "-c", f"cd {shlex.quote(str(checkout))} && exec {shlex.join(serve)}"]
    base = f"http://127.0.0.1:{port}"
    try:
        return spawn(cmd, f"{base}/health", 30.0, base_url=base)
    finally:
        os.unlink(path)


def leftovers(url: str) -> dict[str, object]:
    state = httpx.get(f"{url}/admin/state", timeout=10).json()
    return {
        "inflight": sum(b["inflight"] for b in state["backends"]),
        "queued": sum(m["depth"] for m in state["models"].values()),
    }


def one_run(
    checkout: Path, config: dict[str, object], args: argparse.Namespace, model: str
) -> dict[str, object]:
    with spawn_gateway_from(checkout, config) as gw:
        result = asyncio.run(sdk_burst(gw.url, args.requests, model, max_tokens=args.max_tokens))
        return {**result.summary(), **leftovers(gw.url)}


def table(results: dict[str, list[dict[str, object]]]) -> str:
    lines = ["| gateway | " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS)]
    for name, runs in results.items():
        cells = []
        for column in COLUMNS:
            values = sorted(float(v) for r in runs if isinstance(v := r.get(column), int | float))
            if not values:
                cells.append("-")
                continue
            median = statistics.median(values)
            cells.append(f"{median:g} ({values[0]:g}-{values[-1]:g})" if len(values) > 1 else f"{median:g}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=1, help="runs per gateway")
    parser.add_argument("--backends", type=int, default=2)
    parser.add_argument("--profile", default="gemma3-4b-rtx4080")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-queue", type=int, default=None, help="queue.max_depth (default: default)")
    parser.add_argument("--compare", type=Path, default=None, help="another checkout, run interleaved")
    args = parser.parse_args()

    gateways = {"this": ROOT} | ({f"{args.compare}": args.compare.resolve()} if args.compare else {})
    results: dict[str, list[dict[str, object]]] = {name: [] for name in gateways}
    with contextlib.ExitStack() as stack:
        sims = [
            stack.enter_context(spawn_sim("--profile", args.profile, "--seed", str(i + 1)))
            for i in range(args.backends)
        ]
        model = httpx.get(f"{sims[0].url}/v1/models").json()["data"][0]["id"]
        config: dict[str, object] = {"backends": [s.url for s in sims]}
        if args.max_queue is not None:
            config["queue"] = {"max_depth": args.max_queue}
        print(
            f"burst of {args.requests} SDK requests (default retries) at {args.backends} x "
            f"{args.profile}, max_tokens {args.max_tokens}, queue.max_depth {args.max_queue or 'default'}",
            flush=True,
        )
        for run in range(args.runs):
            for name, checkout in gateways.items():
                outcome = one_run(checkout, config, args, model)
                results[name].append(outcome)
                print(f"run {run + 1} {name}: {outcome}", flush=True)
    print(table(results))


if __name__ == "__main__":
    main()
