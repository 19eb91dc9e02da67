"""What the gateway costs over a minimal Python proxy, side by side in one run, and what a second worker buys.

Three parts, each interleaving its targets A B C A B C ... over `--rounds` (the machine is shared and
noisy: every cell gives the median over rounds and the spread):
1. Non-streaming, against a static nginx backend (loadtests.proxy_load): wrk at concurrency 1 (P50
   latency) and 32 (requests/s) through the minimal proxy (loadtests.minproxy: uvicorn + httptools +
   uvloop, raw ASGI, an aiohttp upstream, no features) and through one gateway process; CPU seconds
   of each proxy per 1,000 requests at concurrency 32.
2. Streaming, against loadtests.sse_source (paced completion streams, one event per stream per
   `--interval`): `--streams` concurrent streams straight to the source, through the minimal proxy
   and through the gateway; the events relayed per second, the inter-token gap P50 / P99 and what
   each proxy adds to the P99 over the source read directly, CPU seconds per 100,000 events.
3. `--workers 1` and `--workers 2` of the gateway with slots shared through Redis: requests/s at
   concurrency 32 and events/s at the middle `--streams` count.
The gateway runs the `fixed` algorithm with a limit above the load, so the proxy is measured, not the
controller. `--compare DIR` adds a gateway run from another checkout (an earlier commit) to parts 1
and 2, as a fourth target. Targets (printed PASS/FAIL): non-streaming >= 0.8x the minimal proxy's
requests/s at concurrency 32 and <= 150 us added P50 at concurrency 1; streaming >= 0.8x its
events/s and added P99 <= 5 ms at 1,000 streams; --workers 2 >= 1.6x --workers 1 in requests/s.

    python -m loadtests.bench_proxy [--rounds 3] [--seconds 5] [--streams 256 1000 4000]
        [--minproxy PATH] [--compare DIR] [--no-workers] [--docs docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import sys
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TypeVar

from gateway.control.window import nearest_rank
from loadtests import proxy_load as load
from loadtests.doc_tables import write_block
from tests.procs import ROOT, Proc, free_port, spawn

MIN = "minimal proxy"
GW = "gateway"
BEFORE = "gateway (compared)"
DIRECT = "direct"
T = TypeVar("T")


def have_wrk() -> bool:
    """Whether wrk is installed; if not, says how to install it."""
    if shutil.which("wrk") is None:
        print("wrk is needed: apt-get install -y wrk (make bench-proxy installs it)")
        return False
    return True


def wrk(url: str, connections: int, seconds: float) -> tuple[float, float]:
    """(requests/s, P50 latency in seconds) from one wrk run (kept for the other benchmarks)."""
    return load.wrk_run(url, connections, seconds)


def spawn_sim(*args: str) -> Proc:
    """The `instant` simulator on a free loopback port (for the benchmarks that need a vLLM-like one)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "gateway.cli", "sim", "--port", str(port), "--profile", "instant"]
    return spawn([*cmd, "--max-num-seqs", "4096", *args], f"{base}/health", base_url=base)


def gateway_for(
    backend: str, *, workers: int = 1, redis_url: str | None = None, checkout: Path = ROOT
) -> Proc:
    """`llm-gateway serve` from `checkout` in front of `backend`, admission limits above any load."""
    import os
    import tempfile

    import yaml

    port = free_port()
    config: dict[str, object] = {
        "listen": {"host": "127.0.0.1", "port": port},
        "backends": [{"url": backend, "name": "b", "models": ["instant"], "max_concurrency": 8192}],
        "controller": {"algorithm": "fixed", "params": {"limit": 8192}},
        "queue": {"max_depth": 16384},
    }
    if redis_url is not None:
        config["state"] = {"redis_url": redis_url, "namespace": f"bench{port}"}
    fd, path = tempfile.mkstemp(suffix=".yaml", prefix="gateway-")
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f)
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "gateway.cli", "serve", "--config", path, "--log-level", "warning"]
    if workers > 1 or redis_url is not None:
        cmd += ["--workers", str(workers)]
    try:
        return spawn(cmd, f"{base}/health", 30.0, base_url=base, cwd=checkout)
    finally:
        os.unlink(path)


def spread(values: list[float], scale: float = 1.0, fmt: str = ",.0f") -> str:
    v = [x * scale for x in values]
    return f"{format(statistics.median(v), fmt)} ({format(min(v), fmt)}-{format(max(v), fmt)})"


def in_turn(names: Iterable[T], round_: int) -> list[T]:
    """The targets in this round's order: forwards, then backwards, so none always follows another."""
    order = list(names)
    return order if round_ % 2 == 0 else order[::-1]


def med(values: list[float]) -> float:
    return statistics.median(values)


def pct(sorted_values: list[float], q: float) -> float:
    return nearest_rank(sorted_values, q) or 0.0


@contextmanager
def proxies(backend: str, args: argparse.Namespace) -> Iterator[dict[str, Proc]]:
    """The minimal proxy, the gateway and (with --compare) the other checkout's gateway."""
    with ExitStack() as stack:
        procs = {MIN: stack.enter_context(load.minimal_proxy(backend, args.minproxy))}
        procs[GW] = stack.enter_context(gateway_for(backend))
        if args.compare is not None:
            procs[BEFORE] = stack.enter_context(gateway_for(backend, checkout=args.compare))
        yield procs


def single_answers(args: argparse.Namespace) -> list[str]:
    """Part 1: P50 at concurrency 1, requests/s and CPU per 1,000 requests at 32, per proxy."""
    p50: dict[str, list[float]] = {}
    rps: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    backend = load.nginx_backend() if load.have_nginx() else load.source_backend(0.02, 1)
    with backend as nginx, proxies(nginx.url, args) as procs:
        for proc in procs.values():
            wrk(proc.url, 32, 2)  # warm-up: connection pools, code paths
        for round_ in range(args.rounds):
            for name in in_turn(procs, round_):
                proc = procs[name]
                p50.setdefault(name, []).append(wrk(proc.url, 1, args.seconds)[1])
                before = load.cpu_of(proc.pid)
                rate, _ = wrk(proc.url, 32, args.seconds)
                rps.setdefault(name, []).append(rate)
                cpu.setdefault(name, []).append((load.cpu_of(proc.pid) - before) / (rate * args.seconds))
    lines = [
        "| proxy | P50 at concurrency 1 | added over the minimal proxy | req/s at concurrency 32 "
        "| of the minimal proxy | CPU s per 1,000 requests |",
        "|---|---|---|---|---|---|",
    ]
    for name in p50:
        added = (med(p50[name]) - med(p50[MIN])) * 1e6
        lines.append(
            f"| {name} | {spread(p50[name], 1e6)} us | {added:+,.0f} us | {spread(rps[name])} "
            f"| {med(rps[name]) / med(rps[MIN]):.2f}x | {spread(cpu[name], 1e3, '.3f')} |"
        )
    ratio, added = med(rps[GW]) / med(rps[MIN]), (med(p50[GW]) - med(p50[MIN])) * 1e6
    lines += [
        "",
        f"Non-streaming targets: req/s at 32 >= 0.8x the minimal proxy: {ratio:.2f}x "
        f"{'PASS' if ratio >= 0.8 else 'FAIL'}; added P50 at 1 <= 150 us: {added:,.0f} us "
        f"{'PASS' if added <= 150 else 'FAIL'}.",
    ]
    return lines


def streaming(args: argparse.Namespace) -> list[str]:
    """Part 2: per stream count, events/s, inter-token P50 / P99 and CPU per 100,000 events."""
    lines = [
        "| streams | target | events/s | of the minimal proxy | inter-token P50 / P99 "
        "| added P99 over direct | CPU s per 100,000 events |",
        "|---|---|---|---|---|---|---|",
    ]
    verdict = ""
    with load.source_backend(args.interval, args.tokens) as source, proxies(source.url, args) as procs:
        targets = {DIRECT: source, **procs}
        for proc in procs.values():
            load.streams_run(proc.url, 64, 0.5, 1.0)  # warm-up
        for streams in args.streams:
            rate: dict[str, list[float]] = {}
            cpu: dict[str, list[float]] = {}
            gaps: dict[str, list[float]] = {}
            for round_ in range(args.rounds):
                for name in in_turn(targets, round_):
                    proc = targets[name]
                    load.quiet(source.url)
                    before = load.cpu_of(proc.pid)
                    run = load.streams_run(proc.url, streams, args.warmup, args.stream_seconds)
                    spent = load.cpu_of(proc.pid) - before
                    rate.setdefault(name, []).append(run.rate)
                    cpu.setdefault(name, []).append(spent / max(run.events, 1) * 1e5)
                    gaps.setdefault(name, []).extend(run.gaps)
            p99 = {name: pct(sorted(g), 0.99) for name, g in gaps.items()}
            for name in targets:
                g = sorted(gaps[name])
                lines.append(
                    f"| {streams:,} | {name} | {spread(rate[name])} "
                    f"| {med(rate[name]) / max(med(rate[MIN]), 1e-9):.2f}x "
                    f"| {pct(g, 0.5) * 1e3:.1f} / {p99[name] * 1e3:.1f} ms "
                    f"| {(p99[name] - p99[DIRECT]) * 1e3:+.1f} ms | {spread(cpu[name], 1.0, '.2f')} |"
                )
            offered = streams / args.interval
            if streams == 1000 and med(rate[DIRECT]) < 0.9 * offered:
                verdict = (
                    f"Streaming targets at 1,000 streams: not judged: the source read directly delivered "
                    f"{med(rate[DIRECT]):,.0f} of the {offered:,.0f} events/s it offers, so the machine "
                    "cannot feed the streams."
                )
            elif streams == 1000:
                ratio, added = med(rate[GW]) / med(rate[MIN]), (p99[GW] - p99[DIRECT]) * 1e3
                verdict = (
                    f"Streaming targets at 1,000 streams: events/s >= 0.8x the minimal proxy: {ratio:.2f}x "
                    f"{'PASS' if ratio >= 0.8 else 'FAIL'}; added inter-token P99 <= 5 ms: {added:.1f} ms "
                    f"{'PASS' if added <= 5 else 'FAIL'}."
                )
    return [*lines, "", verdict] if verdict else lines


def workers(args: argparse.Namespace) -> list[str]:
    """Part 3: --workers 1 against --workers 2, slots shared through Redis; with the CPU the
    gateway and redis-server spent per request, and how busy the whole machine was."""
    from loadtests.proc_cpu import machine_seconds
    from tests.redis_server import running_redis

    streams = args.streams[len(args.streams) // 2]
    rps: dict[int, list[float]] = {1: [], 2: []}
    rate: dict[int, list[float]] = {1: [], 2: []}
    cpu: dict[int, list[float]] = {1: [], 2: []}
    redis_cpu: dict[int, list[float]] = {1: [], 2: []}
    busy: dict[int, list[float]] = {1: [], 2: []}
    backend = load.nginx_backend() if load.have_nginx() else load.source_backend(0.02, 1)
    with ExitStack() as stack:
        redis = stack.enter_context(running_redis())
        assert redis.pid is not None
        nginx = stack.enter_context(backend)
        source = stack.enter_context(load.source_backend(args.interval, args.tokens))
        answers = {
            n: stack.enter_context(gateway_for(nginx.url, workers=n, redis_url=redis.url)) for n in rps
        }
        streamed = {
            n: stack.enter_context(gateway_for(source.url, workers=n, redis_url=redis.url)) for n in rps
        }
        for n in rps:
            wrk(answers[n].url, 32, 2)
            load.streams_run(streamed[n].url, 64, 0.5, 1.0)
        for round_ in range(args.rounds):
            for n in in_turn(rps, round_):
                gw, rd, (total, idle) = load.cpu_of(answers[n].pid), load.cpu_of(redis.pid), machine_seconds()
                rps[n].append(wrk(answers[n].url, 32, args.seconds)[0])
                requests = rps[n][-1] * args.seconds
                total2, idle2 = machine_seconds()
                cpu[n].append((load.cpu_of(answers[n].pid) - gw) / requests * 1e3)
                redis_cpu[n].append((load.cpu_of(redis.pid) - rd) / requests * 1e3)
                busy[n].append(1 - (idle2 - idle) / max(total2 - total, 1e-9))
                load.quiet(source.url)
                rate[n].append(
                    load.streams_run(streamed[n].url, streams, args.warmup, args.stream_seconds).rate
                )
    ratio = med(rps[2]) / med(rps[1])
    return [
        f"| gateway, slots in Redis | req/s at concurrency 32 | vs 1 worker | gateway CPU s per 1,000 "
        f"| redis-server CPU s per 1,000 | machine busy | events/s at {streams:,} streams | vs 1 worker |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| --workers {n} | {spread(rps[n])} | {med(rps[n]) / med(rps[1]):.2f}x "
            f"| {spread(cpu[n], 1.0, '.3f')} | {spread(redis_cpu[n], 1.0, '.3f')} "
            f"| {spread(busy[n], 100.0, '.0f')} % | {spread(rate[n])} | {med(rate[n]) / med(rate[1]):.2f}x |"
            for n in rps
        ),
        "",
        f"Scaling target: --workers 2 >= 1.6x one worker's req/s: {ratio:.2f}x "
        f"{'PASS' if ratio >= 1.6 else 'FAIL'}.",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5, help="each wrk run")
    parser.add_argument("--streams", type=int, nargs="+", default=[256, 1000, 4000])
    parser.add_argument("--stream-seconds", type=float, default=5.0, help="each streaming window")
    parser.add_argument("--warmup", type=float, default=2.0, help="streaming before each window")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between a stream's events")
    parser.add_argument("--tokens", type=int, default=50, help="events per stream")
    parser.add_argument("--minproxy", type=Path, help="a minimal proxy script taking PORT UPSTREAM")
    parser.add_argument("--compare", type=Path, help="another checkout whose gateway runs beside")
    parser.add_argument("--parts", nargs="+", default=["single", "streaming", "workers"])
    parser.add_argument("--docs", type=Path, help="also write the tables into this document's block")
    args = parser.parse_args()
    if not have_wrk():
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the processes started, by pid
    parts = {"single": single_answers, "streaming": streaming, "workers": workers}
    out: list[str] = []
    for part in args.parts:
        lines = parts[part](args)
        print("\n".join(lines) + "\n", flush=True)
        out += [*lines, ""]
    table = "\n".join(out)
    if args.docs is not None:
        write_block(args.docs, "bench-proxy", table)
    return 1 if "FAIL" in table else 0


if __name__ == "__main__":
    sys.exit(main())
