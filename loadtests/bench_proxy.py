"""What the gateway costs: the `instant` sim direct against the same sim through the gateway, one run.

1. non-streaming, concurrency 1: added P50 latency (target <= 1 ms)
2. non-streaming, concurrency 32: requests/s through one gateway process (target >= 1,500)
3. 256 concurrent streams at 20 ms per token: added inter-token P99 (target <= 5 ms)

Non-streaming load comes from wrk (C, cheap enough not to starve the processes it measures on a
2-core machine); the streams are read by loadtests.http_client, which timestamps every token chunk.
The gateway runs the `fixed` algorithm with a limit above the load, so this measures the proxy, not
the controller.

    .venv/bin/python -m loadtests.bench_proxy [--seconds 8] [--docs docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

from gateway.control.window import nearest_rank
from loadtests.doc_tables import write_block
from loadtests.http_client import Connection
from tests.procs import Proc, free_port, spawn, spawn_gateway

BODY = '{"model":"instant","messages":[{"role":"user","content":"hi"}],"max_tokens":1}'
LUA = f"""wrk.method = "POST"
wrk.body = '{BODY}'
wrk.headers["Content-Type"] = "application/json"
"""
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def spawn_sim(*args: str) -> Proc:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable,
        "-m",
        "gateway.cli",
        "sim",
        "--port",
        str(port),
        "--profile",
        "instant",
        "--max-num-seqs",
        "4096",
        *args,
    ]
    return spawn(cmd, f"{base}/health", base_url=base)


def gateway_for(sim: Proc) -> Proc:
    return spawn_gateway(
        {
            "backends": [{"url": sim.url, "max_concurrency": 4096}],
            "controller": {"algorithm": "fixed", "params": {"limit": 4096}},
            "queue": {"max_depth": 8192},
        }
    )


def have_wrk() -> bool:
    """Whether wrk is installed; if not, says how to install it."""
    if shutil.which("wrk") is None:
        print("wrk is needed: apt-get install -y wrk (make bench-proxy installs it)")
        return False
    return True


def wrk(url: str, connections: int, seconds: float) -> tuple[float, float]:
    """(requests/s, P50 latency in seconds) from one wrk run."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(LUA)
        script.flush()
        out = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{connections}",
                f"-d{round(seconds)}s",
                "--latency",
                "-s",
                script.name,
                f"{url}/v1/chat/completions",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"errors during the run:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    assert p50 is not None, out
    return rps, float(p50.group(1)) * _UNITS[p50.group(2)]


async def _stream_gaps(url: str, tokens: int) -> list[float]:
    body = orjson.dumps(
        {"model": "instant", "prompt": "go", "max_tokens": tokens, "ignore_eos": True, "stream": True}
    )
    conn = Connection.to(url)
    try:
        answer = await conn.post("/v1/completions", body, stamps=True)
    finally:
        conn.close()
    return [b - a for a, b in itertools.pairwise(answer.stamps)]


def stream_gaps(url: str, streams: int, tokens: int) -> list[float]:
    import uvloop

    async def run() -> list[float]:
        results = await asyncio.gather(*(_stream_gaps(url, tokens) for _ in range(streams)))
        return sorted(g for gaps in results for g in gaps)

    return uvloop.run(run())


def pct(sorted_values: list[float], q: float) -> float:
    return nearest_rank(sorted_values, q) or 0.0


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def doc_table(
    results: dict[str, tuple[float, float]], direct: list[float], via: list[float], title: str
) -> str:
    """The table of docs/benchmarks.md: direct, through the gateway, and each target's verdict."""
    added_p50 = results["via-c1"][1] - results["direct-c1"][1]
    added_p99 = pct(via, 0.99) - pct(direct, 0.99)
    rps = results["via-c32"][0]
    ok = ("PASS", "FAIL")

    def gaps(values: list[float]) -> str:
        return f"{pct(values, 0.5) * 1e3:.2f} / {pct(values, 0.99) * 1e3:.2f} ms"

    return "\n".join(
        [
            "| measure | direct | via gateway | target |",
            "|---|---|---|---|",
            f"| non-streaming, concurrency 1, P50 latency | {_ms(results['direct-c1'][1])} "
            f"| {_ms(results['via-c1'][1])} (**added {_ms(added_p50)}**) "
            f"| added <= 1 ms: {ok[added_p50 > 1e-3]} |",
            f"| non-streaming, concurrency 32, requests/s | {results['direct-c32'][0]:,.0f} "
            f"| **{rps:,.0f}** | >= 1,500: {ok[rps < 1500]} |",
            f"| {title}, inter-token P50 / P99 | {gaps(direct)} "
            f"| {gaps(via)} (**added P99 {added_p99 * 1e3:.1f} ms**) "
            f"| added P99 <= 5 ms: {ok[added_p99 > 5e-3]} |",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--docs", type=Path, help="also write the table into this document's block")
    args = parser.parse_args()
    if not have_wrk():
        return 2

    results: dict[str, tuple[float, float]] = {}
    with spawn_sim() as sim, gateway_for(sim) as gw:
        for url in (sim.url, gw.url):
            wrk(url, 32, 2)  # warm-up: connection pools, code paths
        for c in (1, 32):
            for name, url in (("direct", sim.url), ("via", gw.url)):
                results[f"{name}-c{c}"] = wrk(url, c, args.seconds)
    with spawn_sim("--step-base", "0.02") as sim, gateway_for(sim) as gw:
        stream_gaps(gw.url, 8, 10)  # warm-up
        direct = stream_gaps(sim.url, args.streams, args.tokens)
        via = stream_gaps(gw.url, args.streams, args.tokens)

    table = doc_table(results, direct, via, f"{args.streams} streams x {args.tokens} tokens at 20 ms/token")
    print(table)
    if args.docs is not None:
        write_block(args.docs, "bench-proxy", table)
    return 1 if "FAIL" in table else 0


if __name__ == "__main__":
    sys.exit(main())
