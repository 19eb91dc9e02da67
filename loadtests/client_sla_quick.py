"""A quick open-loop check of the SLA as the client sees it, against the simulator: direct vs gateway.

One simulated vLLM; its capacity is measured closed loop (`--clients` streams for
`--capacity-seconds`); then open-loop arrivals (Poisson, or burstier with `--burstiness`) at
`--factor` x that rate for `--seconds`, sent straight to the simulator and through a fresh gateway
(`--sla-ttft-p90`, `--sla-tpot-p90`, everything else default), interleaved `--repeat` times.
Requests are not retried (as `vllm bench serve` does not). Printed per run: goodput (completed
requests per second meeting both targets as the client measured them), completed, refused (and how
many of those carried Retry-After), failed, and the client TTFT and TPOT P90 of the served.

    .venv/bin/python -m loadtests.client_sla_quick --factor 1.5 --seconds 40 --repeat 2

The full benchmark (vllm bench serve, the real engine, closed loop, more rates) is loadtests/client_sla/.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from dataclasses import dataclass, field

import aiohttp
import httpx

from loadtests.stats import p90
from loadtests.streaming import StreamReader
from tests.procs import Proc, spawn_gateway, spawn_sim

PROMPT_CHARS = 200
"""Random digits, a fresh prompt each request as `vllm bench serve`'s random dataset: no prefix is
shared (the simulator counts about a token a byte)."""


@dataclass(slots=True)
class Tally:
    sent: int = 0
    good: int = 0
    completed: int = 0
    refused: int = 0
    advised: int = 0
    failed: int = 0
    ttfts: list[float] = field(default_factory=list)
    tpots: list[float] = field(default_factory=list)


async def one(
    client: aiohttp.ClientSession, url: str, model: str, args: argparse.Namespace, tally: Tally
) -> None:
    body = {
        "model": model,
        "prompt": "".join(random.choice("0123456789") for _ in range(PROMPT_CHARS)),
        "max_tokens": args.max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.monotonic()
    tally.sent += 1
    reader = StreamReader(started)
    try:
        async with client.post(f"{url}/v1/completions", json=body) as resp:
            if resp.status in (429, 503):
                await resp.read()
                tally.refused += 1
                tally.advised += "retry-after" in resp.headers
                return
            if resp.status != 200:
                await resp.read()
                tally.failed += 1
                return
            async for line in resp.content:
                reader.feed(line, time.monotonic())
    except aiohttp.ClientError:
        tally.failed += 1
        return
    t = reader.timings(time.monotonic())
    if reader.error is not None or t.ttft is None:
        tally.failed += 1
        return
    tally.completed += 1
    tally.ttfts.append(t.ttft)
    if t.tpot is not None:
        tally.tpots.append(t.tpot)
    if t.ttft <= args.sla_ttft_p90 and (t.tpot is None or t.tpot <= args.sla_tpot_p90):
        tally.good += 1


def session() -> aiohttp.ClientSession:
    """A client as `vllm bench serve`'s: aiohttp, no connection limit, no total timeout."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
    )


async def open_loop(url: str, model: str, rate: float, args: argparse.Namespace, seed: int) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    tasks: list[asyncio.Task[None]] = []
    async with session() as client:
        end = time.monotonic() + args.seconds
        at = time.monotonic()
        while at < end:
            # Gamma gaps of mean 1 / rate, as `vllm bench serve --burstiness` (1: Poisson).
            at += rng.gammavariate(args.burstiness, 1.0 / (rate * args.burstiness))
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            tasks.append(asyncio.create_task(one(client, url, model, args, tally)))
        await asyncio.gather(*tasks)
    return tally


async def capacity(url: str, model: str, args: argparse.Namespace) -> float:
    """Requests per second `--clients` closed-loop streams complete."""
    tally = Tally()
    stop = time.monotonic() + args.capacity_seconds
    async with session() as client:

        async def loop() -> None:
            while time.monotonic() < stop:
                await one(client, url, model, args, tally)

        began = time.monotonic()
        await asyncio.gather(*(loop() for _ in range(args.clients)))
    return tally.completed / (time.monotonic() - began)


def line(name: str, t: Tally, seconds: float) -> str:
    ttft, tpot = p90(t.ttfts), p90(t.tpots)
    return (
        f"{name:8s} goodput {t.good / seconds:5.2f}/s  completed {t.completed:4d}/{t.sent:4d}  "
        f"refused {t.refused:4d} (Retry-After on {t.advised})  failed {t.failed:3d}  "
        f"client TTFT P90 {ttft or 0:6.2f}s  TPOT P90 {1000 * (tpot or 0):5.0f}ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="tiny-cpu-4l")
    parser.add_argument("--factor", type=float, default=1.5)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--burstiness", type=float, default=1.0, help="1: Poisson; lower: burstier")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--capacity-seconds", type=float, default=20.0)
    parser.add_argument("--max-tokens", type=int, default=120)
    parser.add_argument("--sla-ttft-p90", type=float, default=1.5)
    parser.add_argument("--sla-tpot-p90", type=float, default=0.15)
    parser.add_argument("--rate", type=float, default=None, help="requests/s (default: factor x capacity)")
    args = parser.parse_args()
    with spawn_sim("--profile", args.profile) as sim:
        model = httpx.get(f"{sim.url}/v1/models").json()["data"][0]["id"]
        rate = args.rate
        if rate is None:
            cap = asyncio.run(capacity(sim.url, model, args))
            rate = args.factor * cap
            print(f"capacity (closed loop, {args.clients} clients): {cap:.2f} req/s; arrivals {rate:.2f}/s")
        config = {
            "backends": [{"url": sim.url, "name": "sim"}],
            "sla": {"ttft_p90": args.sla_ttft_p90, "tpot_p90": args.sla_tpot_p90},
        }
        for i in range(args.repeat):
            direct = asyncio.run(open_loop(sim.url, model, rate, args, seed=i))
            print(line(f"direct {i + 1}", direct, args.seconds), flush=True)
            gw: Proc
            with spawn_gateway(config) as gw:
                through = asyncio.run(open_loop(gw.url, model, rate, args, seed=i))
            print(line(f"gateway {i + 1}", through, args.seconds), flush=True)


if __name__ == "__main__":
    main()
