"""Batch benchmark: a job of 5,000 candidate evaluations through the gateway's Batch API, on
simulated vLLM.

The job: Gemma 3 4B on one RTX 4080, about 788 prompt and 308 output tokens per evaluation.
One simulated backend, profile `gemma3-4b-rtx4080` (that card's 11,824 KV tokens), run `--speed`
times faster than real time (default 4) so a 5,000-line batch takes minutes; every time below is
wall-clock at that speed, and the gateway's TTFT target is the SLA divided by it.

1. Throughput. The best concurrency of a closed loop straight at the backend is found by a sweep
   (`--sweep`, `--sweep-seconds` each); then, interleaved A B A B (`--repeats`), the same number of
   requests as a closed loop at that concurrency (A) and as one batch through a fresh gateway (B).
   Target: batch tokens/s (prompt + completion) >= 90% of the closed loop's, pair by pair.
2. Interactive. `--users` streaming closed-loop clients through one gateway, after
   `--warmup-seconds`: alone for `--alone-seconds` (A) and while a batch of `--interactive-lines`
   runs (B), A B A B (`--repeats` pairs), so each pair compares neighbouring minutes of a machine
   whose load drifts. Targets: interactive TTFT P90 (as the clients saw it) within the SLA + 10%,
   interactive tokens/s >= 90% of alone, pair by pair.
3. Restart. A `--restart-lines` batch (default 2,000, 32 output tokens, speed 16): the gateway is
   killed with SIGKILL once half the lines are answered and started again on the same data
   directory. Target: the batch completes with every custom_id exactly once in the output.
4. Memory. A `--memory-lines` batch (default 50,000) of the same prompts with `--memory-tokens`
   output tokens on a fast profile (`tiny` step times); the gateway's peak RSS (VmHWM). Target < 300 MB.

    .venv/bin/python -m loadtests.bench_batch                       # everything (about an hour)
    .venv/bin/python -m loadtests.bench_batch --lines 1000 --repeats 1 --memory-lines 5000   # a try
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import openai
import orjson

from loadtests.batch_load import (
    CHAT,
    MODEL,
    Interactive,
    Throughput,
    batch_file,
    direct_closed_loop,
    interactive_loop,
    poll,
    run_batch,
)
from loadtests.scenarios.sampler import read_memory_mb
from tests.procs import Proc, spawn_gateway, spawn_sim

PROFILE = "gemma3-4b-rtx4080"
SLA_TTFT = 1.0
"""Seconds, in the profile's own time: the gateway's target is this / speed."""


@contextmanager
def backend(speed: float, *extra: str) -> Iterator[Proc]:
    with spawn_sim("--profile", PROFILE, "--speed", str(speed), "--seed", "4", *extra) as sim:
        yield sim


def gateway_config(sim: Proc, speed: float, data_dir: str) -> dict[str, object]:
    return {
        "backends": [{"url": sim.url, "name": "gemma", "max_concurrency": 128}],
        "sla": {"ttft_p90": SLA_TTFT / speed},
        "batch": {"data_dir": data_dir},
    }


@contextmanager
def gateway(sim: Proc, speed: float, routing: str | None = None) -> Iterator[Proc]:
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as data:
        config = gateway_config(sim, speed, data)
        if routing is not None:
            config["routing"] = {"strategy": routing}
        with spawn_gateway(config, timeout=60) as gw:
            yield gw


def client(gw: Proc) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="bench", max_retries=2, timeout=3600)


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f})"


async def sweep(sim: Proc, args: argparse.Namespace) -> int:
    best, best_rate = 0, 0.0
    print("closed loop straight at the backend, non-streaming:")
    for clients in args.sweep:
        got = await direct_closed_loop(sim.url, f"sweep{clients}", 1 << 30, clients, args.sweep_seconds)
        print(f"  {clients:3d} clients: {got.tokens_per_s:8.0f} tok/s ({got.requests} requests)")
        if got.tokens_per_s > best_rate:
            best, best_rate = clients, got.tokens_per_s
    print(f"best concurrency: {best}")
    return best


async def throughput(sim: Proc, best: int, args: argparse.Namespace) -> list[float]:
    ratios: list[float] = []
    print("\n| run | mode | lines | tok/s | completion tok/s | seconds | failed |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in range(args.repeats):
        direct = await direct_closed_loop(sim.url, f"direct{r}", args.lines, best)
        row(r, f"closed loop, {best} clients", direct)
        with gateway(sim, args.speed) as gw:
            batch, status = await run_batch(client(gw), f"batch{r}", args.lines)
        row(r, f"batch ({status})", batch)
        ratios.append(batch.tokens_per_s / direct.tokens_per_s)
    print(f"\nbatch / closed loop tok/s: {spread(ratios)}")
    return ratios


def row(run: int, mode: str, t: Throughput) -> None:
    print(
        f"| {run} | {mode} | {t.requests} | {t.tokens_per_s:.0f} | {t.completion_per_s:.0f} "
        f"| {t.seconds:.1f} | {t.errors} |"
    )


async def interactive(sim: Proc, args: argparse.Namespace) -> tuple[list[float], list[float], float]:
    """One gateway, the interactive users always on after a warm-up; windows alternate between the
    users alone for `--alone-seconds` (A) and the users while a batch of `--interactive-lines` runs
    (B), A B A B, so each pair's ratio compares neighbouring minutes of the same machine."""
    target = SLA_TTFT / args.speed
    lines = args.interactive_lines or args.lines
    p90_ratios: list[float] = []
    rate_ratios: list[float] = []
    print(f"\n{args.users} interactive streaming users, {lines}-line batches")
    print(f"TTFT target {target * 1000:.0f} ms")
    print("| pair | mode | seconds | requests | TTFT P90 (ms) | completion tok/s | batch tok/s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    with gateway(sim, args.speed) as gw:
        await window(gw, "warmup", args, args.warmup_seconds)
        for r in range(args.repeats):
            alone = await window(gw, f"alone{r}", args, args.alone_seconds)
            irow(r, "alone", alone, None)
            stop = asyncio.Event()
            loop = asyncio.create_task(interactive_loop(gw.url, f"mixed{r}", args.users, stop))
            batch, _ = await run_batch(client(gw), f"mixed{r}", lines)
            stop.set()
            mixed = await loop
            irow(r, "with the batch", mixed, batch)
            p90_ratios.append((mixed.ttft_p90 or 0.0) / target)
            rate_ratios.append(mixed.completion_per_s / alone.completion_per_s)
    print(f"\ninteractive TTFT P90 / target with the batch: {spread(p90_ratios)}")
    print(f"interactive tok/s with / without the batch: {spread(rate_ratios)}")
    return p90_ratios, rate_ratios, target


async def window(gw: Proc, run: str, args: argparse.Namespace, seconds: float) -> Interactive:
    stop = asyncio.Event()
    loop = asyncio.create_task(interactive_loop(gw.url, run, args.users, stop))
    await asyncio.sleep(seconds)  # the window's length: the users run until it ends
    stop.set()
    return await loop


def irow(run: int, mode: str, i: Interactive, batch: Throughput | None) -> None:
    p90 = "-" if i.ttft_p90 is None else f"{i.ttft_p90 * 1000:.0f}"
    batch_rate = "-" if batch is None else f"{batch.tokens_per_s:.0f}"
    rate = f"{i.completion_per_s:.0f}"
    print(f"| {run} | {mode} | {i.seconds:.0f} | {i.requests} | {p90} | {rate} | {batch_rate} |")


async def memory(args: argparse.Namespace) -> float:
    model = ("--profile", "instant", "--model", MODEL)
    with spawn_sim(*model) as sim, gateway(sim, 1.0, args.memory_routing) as gw:
        batch, status = await run_batch(client(gw), "memory", args.memory_lines, args.memory_tokens)
        memory_mb = read_memory_mb(gw.pid)
    peak = memory_mb[1] if memory_mb else float("nan")
    print(
        f"\n{args.memory_lines}-line batch: {status}, {batch.requests} completed, {batch.errors} failed, "
        f"{batch.seconds:.0f} s; gateway peak RSS {peak:.0f} MB (routing: {args.memory_routing or 'default'})"
    )
    return peak


async def restart(args: argparse.Namespace) -> bool:
    """SIGKILL the gateway halfway through a batch, start it again on the same data directory."""
    lines, speed = args.restart_lines, 16.0
    with backend(speed) as sim, tempfile.TemporaryDirectory(prefix="bench-batch-") as data:
        config = gateway_config(sim, speed, data)
        with spawn_gateway(config, timeout=60) as first:
            c = client(first)
            payload = b"".join(batch_file("restart", lines, max_tokens=32))
            file = await c.files.create(file=("restart.jsonl", payload), purpose="batch")
            batch = await c.batches.create(input_file_id=file.id, endpoint=CHAT, completion_window="24h")
            await poll(
                c,
                batch.id,
                lambda b: b.request_counts is not None and b.request_counts.completed >= lines // 2,
            )
            os.kill(first.pid, signal.SIGKILL)
            first.popen.wait(10)
        with spawn_gateway(config, timeout=60) as second:
            c = client(second)
            b = await poll(c, batch.id, lambda b: b.status in ("completed", "failed"))
            assert b.output_file_id is not None and b.request_counts is not None
            out = (await c.files.content(b.output_file_id)).content.splitlines()
    ids = Counter(orjson.loads(line)["custom_id"] for line in out)
    once = ids == Counter(f"restart-{i}" for i in range(lines))
    print(
        f"\n{lines}-line batch, SIGKILL at {lines // 2}+ answered, restarted: {b.status}, "
        f"{b.request_counts.completed} completed, {len(ids)} custom_ids in the output, "
        f"each once: {once}"
    )
    return once and b.status == "completed"


async def main_async(args: argparse.Namespace) -> int:
    checks: list[tuple[str, bool]] = []
    if not args.skip_throughput or not args.skip_interactive:
        with backend(args.speed) as sim:
            if not args.skip_throughput:
                best = args.best or await sweep(sim, args)
                ratios = await throughput(sim, best, args)
                checks.append(
                    (
                        f"batch tok/s >= 90% of the closed loop at {best} (worst pair {min(ratios):.2f})",
                        min(ratios) >= 0.9,
                    )
                )
            if not args.skip_interactive:
                p90, rates, _ = await interactive(sim, args)
                checks.append(
                    (f"interactive TTFT P90 <= SLA + 10% (worst {max(p90):.2f} of target)", max(p90) <= 1.1)
                )
                checks.append(
                    (f"interactive tok/s >= 90% of alone (worst {min(rates):.2f})", min(rates) >= 0.9)
                )
    if args.restart_lines:
        ok = await restart(args)
        checks.append(
            (f"SIGKILL halfway through a {args.restart_lines}-line batch: every custom_id once", ok)
        )
    if args.memory_lines:
        peak = await memory(args)
        checks.append((f"{args.memory_lines}-line batch: gateway RSS < 300 MB ({peak:.0f} MB)", peak < 300))
    print()
    for text, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'} {text}")
    return 0 if all(ok for _, ok in checks) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--speed", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sweep", type=int, nargs="*", default=[8, 12, 16, 24, 32])
    parser.add_argument("--sweep-seconds", type=float, default=20.0)
    parser.add_argument("--best", type=int, default=0, help="skip the sweep: use this concurrency")
    parser.add_argument("--users", type=int, default=6)
    parser.add_argument("--alone-seconds", type=float, default=60.0)
    parser.add_argument("--warmup-seconds", type=float, default=20.0)
    parser.add_argument(
        "--interactive-lines", type=int, default=0, help="lines per batch beside users (0: --lines)"
    )
    parser.add_argument("--memory-lines", type=int, default=50_000)
    parser.add_argument("--memory-tokens", type=int, default=16)
    parser.add_argument("--memory-routing", default=None, help="routing.strategy of the memory run's gateway")
    parser.add_argument("--restart-lines", type=int, default=2000)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-interactive", action="store_true")
    return asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
