"""Concurrency sweep against a simulated vLLM server: throughput and latency against the number of
clients, the curve that shows where a serving engine's batch saturates.

For each concurrency N in 1, 2, 4, ..., 128, N clients send chat completions back to back
(non-streaming, `max_tokens` 100, output length log-normal as the profile draws it) for a fixed
time. Prints concurrency, req/s, tok/s, P50 and P90 latency, and saves two plots: throughput and
P50/P90 latency against concurrency.

    .venv/bin/python -m loadtests.bench_sim_sweep [--profile llama3-8b-h100] [--seconds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import orjson

from loadtests.http_client import Connection
from loadtests.stats import percentile
from tests.procs import spawn_sim

PROMPTS = [
    "What is machine learning? Explain briefly.",
    "Write a short poem about the ocean.",
    "List 5 tips for learning a new programming language.",
    "Explain the water cycle in simple terms.",
]


async def level(url: str, clients: int, seconds: float, max_tokens: int) -> dict[str, float]:
    latencies: list[float] = []
    tokens = 0
    end = time.perf_counter() + seconds

    async def client(c: int) -> None:
        nonlocal tokens
        conn = Connection.to(url)
        i = c
        try:
            while time.perf_counter() < end:
                i += 1
                body = {
                    "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                    "max_tokens": max_tokens,
                    "temperature": 0.7,
                }
                answer = await conn.post("/v1/chat/completions", orjson.dumps(body))
                if answer.status != 200:
                    raise RuntimeError(f"HTTP {answer.status}: {answer.body[:200]!r}")
                latencies.append(answer.ended - answer.sent)
                tokens += orjson.loads(answer.body)["usage"]["completion_tokens"]
        finally:
            conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    elapsed = time.perf_counter() - start
    return {
        "concurrency": clients,
        "req_s": len(latencies) / elapsed,
        "tok_s": tokens / elapsed,
        "p50": percentile(latencies, 0.5) or 0.0,
        "p90": percentile(latencies, 0.9) or 0.0,
    }


def plot(rows: list[dict[str, float]], out: Path, profile: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conc = [r["concurrency"] for r in rows]
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(conc, [r["tok_s"] for r in rows], "o-", label="tok/s")
    ax2 = ax.twinx()
    ax2.plot(conc, [r["req_s"] for r in rows], "s--", color="tab:orange", label="req/s")
    ax.set(xscale="log", xlabel="concurrency", ylabel="tokens/s", title=f"Throughput ({profile})")
    ax2.set_ylabel("requests/s")
    fig.tight_layout()
    throughput = out / f"sim_sweep_throughput_{profile}.png"
    fig.savefig(throughput)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(conc, [r["p50"] for r in rows], "^-", label="P50")
    ax.plot(conc, [r["p90"] for r in rows], "s-", label="P90")
    ax.set(xscale="log", xlabel="concurrency", ylabel="latency (s)", title=f"Latency ({profile})")
    ax.legend()
    fig.tight_layout()
    latency = out / f"sim_sweep_latency_{profile}.png"
    fig.savefig(latency)
    return [throughput, latency]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", default="llama3-8b-h100")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--max-tokens", type=int, default=100)
    parser.add_argument("--max-concurrency", type=int, default=128)
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    levels = [2**i for i in range(args.max_concurrency.bit_length()) if 2**i <= args.max_concurrency]
    rows = []
    with spawn_sim("--profile", args.profile) as sim:
        print(f"{'concurrency':>11} {'req/s':>7} {'tok/s':>8} {'P50 (s)':>8} {'P90 (s)':>8}")
        for n in levels:
            row = asyncio.run(level(sim.url, n, args.seconds, args.max_tokens))
            rows.append(row)
            print(
                f"{n:>11} {row['req_s']:>7.2f} {row['tok_s']:>8.0f} {row['p50']:>8.3f} {row['p90']:>8.3f}",
                flush=True,
            )
    for path in plot(rows, args.out, args.profile):
        print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
