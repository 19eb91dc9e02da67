"""Can the simulated server keep up with its own model? 256 concurrent SSE streams at 20 ms/token.

The sim runs pinned to one core (taskset) with a constant 20 ms step; loadtests.http_client on the
other core opens every stream at once and measures each stream's mean inter-token time
((last token - first token) / (tokens - 1)). Prints measured vs modelled; passes within 10%.

    .venv/bin/python -m loadtests.bench_sim_keepup [--streams 256] [--tokens 150]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import time

import orjson

from loadtests.http_client import Connection
from loadtests.proc_cpu import process_seconds
from tests.procs import free_port, spawn


async def one_stream(url: str, tokens: int) -> tuple[float, float]:
    """When the first and the last token of one stream arrived."""
    body = orjson.dumps({"prompt": "hello", "max_tokens": tokens, "ignore_eos": True, "stream": True})
    conn = Connection.to(url)
    try:
        answer = await conn.post("/v1/completions", body, stamps=True)
    finally:
        conn.close()
    return answer.stamps[0], answer.stamps[-1]


async def measure(url: str, streams: int, tokens: int) -> list[float]:
    results = await asyncio.gather(*(one_stream(url, tokens) for _ in range(streams)))
    return [(last - first) / (tokens - 1) for first, last in results]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=150)
    parser.add_argument("--step", type=float, default=0.020)
    args = parser.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "gateway.cli", "sim", "--port", str(port), "--profile", "instant"]
    cmd += ["--step-base", str(args.step), "--max-num-seqs", str(max(args.streams, 1))]
    cpus = sorted(os.sched_getaffinity(0))
    if shutil.which("taskset") and len(cpus) > 1:
        cmd = ["taskset", "-c", str(cpus[0]), *cmd]
        os.sched_setaffinity(0, set(cpus[1:]))
    import uvloop

    with spawn(cmd, f"{base}/health", base_url=base) as sim:
        uvloop.run(measure(sim.url, 8, 20))  # warm-up
        cpu0, wall0 = process_seconds(sim.pid), time.perf_counter()
        gaps = uvloop.run(measure(sim.url, args.streams, args.tokens))
        cpu1, wall1 = process_seconds(sim.pid), time.perf_counter()
    mean = statistics.fmean(gaps)
    worst = max(gaps)
    ratio = mean / args.step
    print(f"streams {args.streams}, tokens {args.tokens}, modelled ITL {args.step * 1000:.1f} ms")
    print(f"measured mean ITL {mean * 1000:.2f} ms (worst stream {worst * 1000:.2f} ms)")
    print(f"sim process CPU: {(cpu1 - cpu0) / (wall1 - wall0):.0%} of one core")
    print(f"measured / modelled = {ratio:.3f}  -> {'OK' if abs(ratio - 1) <= 0.10 else 'FAIL'}")
    return 0 if abs(ratio - 1) <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
