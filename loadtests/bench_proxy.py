"""What the gateway costs: the `instant` sim direct against the same sim through the gateway, one run.

1. non-streaming, concurrency 1: added P50 latency (target <= 1 ms)
2. non-streaming, concurrency 32: requests/s through one gateway process (target >= 1,500)
3. 256 concurrent streams at 20 ms per token: added inter-token P99 (target <= 5 ms)

Non-streaming load comes from wrk (C, cheap enough not to starve the processes it measures on a
2-core machine); the streams are read by a raw asyncio client that timestamps every chunk. The gateway
runs the `fixed` algorithm with a limit above the load, so this measures the proxy, not the controller.

    .venv/bin/python loadtests/bench_proxy.py [--seconds 8]
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
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
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


async def _stream_gaps(port: int, tokens: int) -> list[float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = orjson.dumps(
        {"model": "instant", "prompt": "go", "max_tokens": tokens, "ignore_eos": True, "stream": True}
    )
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json"
        b"\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )
    stamps: list[float] = []
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                raise ConnectionError("stream ended early")
            now = time.perf_counter()
            stamps.extend([now] * data.count(b'"text":'))
            if b"[DONE]" in data:
                break
    finally:
        writer.close()
    return [b - a for a, b in itertools.pairwise(stamps)]


def stream_gaps(url: str, streams: int, tokens: int) -> list[float]:
    import uvloop

    port = int(url.rsplit(":", 1)[1])

    async def run() -> list[float]:
        results = await asyncio.gather(*(_stream_gaps(port, tokens) for _ in range(streams)))
        return sorted(g for gaps in results for g in gaps)

    return uvloop.run(run())


def pct(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=100)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is needed: apt-get install -y wrk (make bench-proxy installs it)")
        return 2
    verdicts: list[bool] = []

    with spawn_sim() as sim, gateway_for(sim) as gw:
        for url in (sim.url, gw.url):
            wrk(url, 32, 2)  # warm-up: connection pools, code paths
        direct_c1, via_c1 = (wrk(url, 1, args.seconds) for url in (sim.url, gw.url))
        direct_c32, via_c32 = (wrk(url, 32, args.seconds) for url in (sim.url, gw.url))
    added_p50 = via_c1[1] - direct_c1[1]
    print(f"{'non-streaming':<28}{'direct':>12}{'via gateway':>14}{'added':>12}")
    print(
        f"{'c=1  P50 latency':<28}{direct_c1[1] * 1e3:>10.3f}ms{via_c1[1] * 1e3:>12.3f}ms"
        f"{added_p50 * 1e3:>10.3f}ms"
    )
    print(f"{'c=1  req/s':<28}{direct_c1[0]:>12,.0f}{via_c1[0]:>14,.0f}")
    print(
        f"{'c=32 req/s':<28}{direct_c32[0]:>12,.0f}{via_c32[0]:>14,.0f}"
        f"{'':>4}ratio {via_c32[0] / direct_c32[0]:.2f}"
    )
    verdicts += [added_p50 <= 1e-3, via_c32[0] >= 1500]

    with spawn_sim("--step-base", "0.02") as sim, gateway_for(sim) as gw:
        stream_gaps(gw.url, 8, 10)  # warm-up
        direct = stream_gaps(sim.url, args.streams, args.tokens)
        via = stream_gaps(gw.url, args.streams, args.tokens)
    print(f"\n{args.streams} streams x {args.tokens} tokens at 20 ms/token: inter-token gaps")
    print(f"{'':<28}{'P50':>10}{'P99':>10}")
    for name, gaps in (("direct", direct), ("via gateway", via)):
        print(f"{name:<28}{pct(gaps, 0.5) * 1e3:>8.2f}ms{pct(gaps, 0.99) * 1e3:>8.2f}ms")
    added_p99 = pct(via, 0.99) - pct(direct, 0.99)
    print(f"{'added':<28}{'':>10}{added_p99 * 1e3:>8.2f}ms")
    verdicts.append(added_p99 <= 5e-3)

    print(
        "\ntargets: added P50 <= 1 ms: {}; >= 1,500 req/s at c=32: {}; added ITL P99 <= 5 ms: {}".format(
            *("PASS" if v else "FAIL" for v in verdicts)
        )
    )
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
