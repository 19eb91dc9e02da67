"""Tenants charged by what they cost: token-fair sharing against request-count fairness, and one
token quota across three replicas sharing Redis. Prints ratios; not a test.

`fairness`: two tenants, both backlogged (closed loop, `--clients` each) behind a fixed limit of 4 on
the simulator (`llama3-8b-h100`, GPU time scale): heavy sends 2,000-token prompts for 500 output
tokens, light 50 and 50, streaming with `usage`. Settings, interleaved A B C D A B C D:
`fairness.cost: tokens` with weights 1:1, `requests` with 1:1, `tokens` with heavy:light 3:1 and
1:3. Per run, over the steady window after `--warmup`: each tenant's share of the tokens served
(a request's prompt counted at its first token, its output spread over its streaming time, clipped
to the window) and the light tenant's client-side TTFT P90 (queue included).

    python -m loadtests.bench_tenants fairness [--reps 2] [--window 60] [--warmup 15] [--clients 8]

`quota`: three gateways sharing one Redis, tenant quota `tokens_per_minute: N`, `--clients` clients
spread over them asking for over 10x N in requests of 100 + 50 tokens (each waits what
`retry-after-ms` says after a 429, as the OpenAI SDK does). Tokens served per minute over minutes
[1, 3) (after the first minute's full bucket), then Redis is stopped and each replica's tokens per
minute over minutes [1, 3) of the fallback (after its own bucket's first burst).

    python -m loadtests.bench_tenants quota [--tpm 6000] [--clients 6]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from loadtests.stats import p90
from tests.procs import Proc, spawn_gateway, spawn_sim
from tests.redis_server import running_redis

HEAVY, LIGHT = (2000, 500), (50, 50)
CHARS_PER_TOKEN = 4  # the GPU profiles' bytes per token
_WORDS = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta")


@dataclass
class Record:
    tenant: str
    replica: int
    start: float
    first: float | None = None
    end: float | None = None
    prompt: int = 0
    output: int = 0
    status: int = 0


def prompt_text(tokens: int, rng: random.Random) -> str:
    """About `tokens` tokens of text whose start differs between requests (no shared prefix)."""
    text = f"{rng.random():.12f} " + " ".join(rng.choice(_WORDS) for _ in range(tokens * 2))
    return text[: tokens * CHARS_PER_TOKEN]


async def one(session: aiohttp.ClientSession, url: str, key: str, job: tuple[int, int], rec: Record) -> float:
    """Stream one completion into `rec`; the seconds a 429 asked to wait (0 otherwise)."""
    body = {
        "model": "m",
        "prompt": prompt_text(job[0], random.Random()),
        "max_tokens": job[1],
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with session.post(
        f"{url}/v1/completions", json=body, headers={"authorization": f"Bearer {key}"}
    ) as r:
        rec.status = r.status
        if r.status != 200:
            await r.read()
            return float(r.headers.get("retry-after-ms", "1000")) / 1000
        buf = b""
        async for chunk in r.content.iter_any():
            if rec.first is None and b'"text"' in chunk:
                rec.first = time.monotonic()
            buf = (buf + chunk)[-2048:]
        rec.end = time.monotonic()
        tail = buf[buf.rfind(b'"usage"') :]
        rec.prompt = int(tail.split(b'"prompt_tokens":')[1].split(b",")[0])
        rec.output = int(tail.split(b'"completion_tokens":')[1].split(b",")[0].split(b"}")[0])
    return 0.0


async def client_loop(
    session: aiohttp.ClientSession,
    urls: list[str],
    replica: int,
    tenant: str,
    key: str,
    job: tuple[int, int],
    until: float,
    out: list[Record],
) -> None:
    while time.monotonic() < until:
        rec = Record(tenant, replica, time.monotonic())
        out.append(rec)
        try:
            wait = await one(session, urls[replica], key, job, rec)
        except (TimeoutError, aiohttp.ClientError, IndexError, ValueError):
            wait = 1.0
        if wait:
            await asyncio.sleep(wait)


def served_in(records: list[Record], lo: float, hi: float, output_price: float = 1.0) -> dict[str, float]:
    """Tokens per tenant in [lo, hi): prompt at the first token, output (each counted
    `output_price` times) spread over the stream."""
    out: dict[str, float] = {}
    for r in records:
        if r.first is None or r.end is None:
            continue
        tokens = r.prompt if lo <= r.first < hi else 0.0
        span = r.end - r.first
        if span > 0:
            tokens += output_price * r.output * max(0.0, min(hi, r.end) - max(lo, r.first)) / span
        elif lo <= r.end < hi:
            tokens += output_price * r.output
        key = f"{r.tenant}@{r.replica}"
        out[key] = out.get(key, 0.0) + tokens
    return out


# -- fairness ---------------------------------------------------------------------------------------

SETTINGS = {
    "tokens 1:1": ("tokens", 1.0, 1.0),
    "requests 1:1": ("requests", 1.0, 1.0),
    "tokens 3:1": ("tokens", 3.0, 1.0),
    "tokens 1:3": ("tokens", 1.0, 3.0),
}


async def fairness_run(
    url: str, clients: int, warmup: float, window: float
) -> tuple[dict[str, float], dict[str, float], float | None, int]:
    records: list[Record] = []
    start = time.monotonic()
    until = start + warmup + window
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        loops = [
            client_loop(session, [url], 0, tenant, key, job, until, records)
            for tenant, key, job in (("heavy", "key-h", HEAVY), ("light", "key-l", LIGHT))
            for _ in range(clients)
        ]
        await asyncio.gather(*loops)
    lo, hi = start + warmup, until
    served = {k.split("@")[0]: v for k, v in served_in(records, lo, hi).items()}
    priced = {k.split("@")[0]: v for k, v in served_in(records, lo, hi, output_price=2.0).items()}
    ttft = p90(r.first - r.start for r in records if r.tenant == "light" and r.first and lo <= r.start < hi)
    refused = sum(1 for r in records if r.status not in (0, 200))
    return served, priced, ttft, refused


def fairness(args: argparse.Namespace) -> None:
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in SETTINGS}
    with spawn_sim("--profile", "llama3-8b-h100", "--model", "m", "--seed", "7") as sim:
        for rep in range(args.reps):
            for name, (cost, wh, wl) in SETTINGS.items():
                config: dict[str, object] = {
                    "backends": [{"url": sim.url, "name": "sim"}],
                    "controller": {"algorithm": "fixed", "params": {"limit": 4}},
                    "queue": {"max_depth": 500, "timeout": 600},
                    "tenants": [
                        {"name": "heavy", "api_keys": ["key-h"], "weight": wh, "queue_timeout": 600},
                        {"name": "light", "api_keys": ["key-l"], "weight": wl, "queue_timeout": 600},
                    ],
                    "fairness": {"cost": cost},
                }
                with spawn_gateway(config, timeout=60) as gw:
                    served, priced, ttft, refused = asyncio.run(
                        fairness_run(gw.url, args.clients, args.warmup, args.window)
                    )
                share = served.get("heavy", 0.0) / max(1.0, sum(served.values()))
                weighted = priced.get("heavy", 0.0) / max(1.0, sum(priced.values()))
                results[name].append((share, ttft or float("nan"), weighted))
                print(
                    f"rep {rep} {name:13s} heavy share {share:.3f} (priced p + 2q: {weighted:.3f})  "
                    f"light TTFT P90 {ttft or float('nan'):.3f} s  refused {refused}",
                    flush=True,
                )
    print(
        "\n| setting (cost, heavy:light) | heavy's share of tokens | light's share "
        "| heavy's share of p + 2q | light TTFT P90 (s) | runs |"
    )
    print("|---|---|---|---|---|---|")
    for name, runs in results.items():
        shares = [r[0] for r in runs]
        ttfts = [r[1] for r in runs]
        print(
            f"| {name} | {statistics.median(shares):.3f} ({min(shares):.3f}-{max(shares):.3f}) "
            f"| {1 - statistics.median(shares):.3f} | {statistics.median(r[2] for r in runs):.3f} "
            f"| {statistics.median(ttfts):.2f} ({min(ttfts):.2f}-{max(ttfts):.2f}) "
            f"| {len(runs)} |"
        )
    by_req = [r[1] for r in results["requests 1:1"]]
    by_tok = [r[1] for r in results["tokens 1:1"]]
    pairs = [a / b for a, b in zip(by_req, by_tok, strict=True)]
    print(
        "\nlight TTFT P90, requests / tokens (1:1), per rep: "
        f"{', '.join(f'{x:.1f}x' for x in pairs)}; worst {min(pairs):.1f}x"
    )


# -- quota ------------------------------------------------------------------------------------------


async def quota_run(
    urls: list[str], clients: int, redis_stop: float, until: float, stop: Callable[[], None]
) -> list[Record]:
    records: list[Record] = []
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        loops = [
            asyncio.create_task(
                client_loop(session, urls, i % len(urls), "team", "key-t", (100, 50), until, records)
            )
            for i in range(clients)
        ]
        await asyncio.sleep(max(0.0, redis_stop - time.monotonic()))
        stop()
        await asyncio.gather(*loops)
    return records


def quota(args: argparse.Namespace) -> None:
    n = args.tpm
    with running_redis() as redis, spawn_sim("--profile", "llama3-8b-h100", "--model", "m") as sim:
        config: dict[str, object] = {
            "backends": [{"url": sim.url, "name": "sim"}],
            "tenants": [{"name": "team", "api_keys": ["key-t"], "tokens_per_minute": n}],
            "state": {"redis_url": redis.url, "lease_seconds": 3.0, "namespace": "bench"},
        }
        gws: list[Proc] = [spawn_gateway(config, timeout=60) for _ in range(3)]
        try:
            time.sleep(3.0)  # every replica heartbeats: each counts three
            t0 = time.monotonic()
            stop_at, end = t0 + 180.0, t0 + 180.0 + 180.0
            records = asyncio.run(quota_run([g.url for g in gws], args.clients, stop_at, end, redis.stop))
        finally:
            for g in gws:
                g.stop()
    shared = served_in(records, t0 + 60.0, t0 + 180.0)
    total_shared = sum(shared.values()) / 2.0
    fallback = served_in(records, stop_at + 60.0, end)
    per_replica = [sum(v for k, v in fallback.items() if k.endswith(f"@{i}")) / 2.0 for i in range(3)]
    refused = sum(1 for r in records if r.status == 429)
    print(f"\nquota N = {n} tokens/min, 3 replicas, {args.clients} clients, {refused} answers 429")
    print("| phase | tokens per minute | / N |")
    print("|---|---|---|")
    print(
        f"| shared through Redis, minutes 1-3, all replicas | {total_shared:.0f} | {total_shared / n:.3f} |"
    )
    for i, v in enumerate(per_replica):
        print(
            f"| Redis stopped, minutes 1-3 of fallback, replica {i} | {v:.0f} | {v / n:.3f} (share 0.333) |"
        )
    print(f"| Redis stopped, all replicas | {sum(per_replica):.0f} | {sum(per_replica) / n:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    f = sub.add_parser("fairness")
    f.add_argument("--reps", type=int, default=2)
    f.add_argument("--window", type=float, default=60.0)
    f.add_argument("--warmup", type=float, default=15.0)
    f.add_argument("--clients", type=int, default=8)
    q = sub.add_parser("quota")
    q.add_argument("--tpm", type=int, default=6000)
    q.add_argument("--clients", type=int, default=6)
    args = parser.parse_args()
    fairness(args) if args.what == "fairness" else quota(args)


if __name__ == "__main__":
    main()
