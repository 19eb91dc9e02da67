"""What sharing admission through Redis costs and buys: one gateway process against two, one run.

Three gateways in front of one `instant` simulator (near-zero step time, so the gateway is what is
measured), each started once and measured in turn, interleaved A B C A B C ... over `--rounds`:
- `1 process`: `serve` without a Redis (admission counted in the process);
- `--workers 1 + Redis`: one process whose every slot is a lease in Redis;
- `--workers 2 + Redis`: two processes on one port (SO_REUSEPORT) sharing the slots.
Per round and gateway: wrk at concurrency 1 (P50 latency) and at concurrency 32 (requests/s),
and the CPU seconds the gateway's processes (supervisor and workers) and redis-server spent per
request at concurrency 32, from /proc. The limit (fixed, 4096) is above the load: this measures the
cost of the path, not the controller. Printed: per gateway the median over rounds and the spread.

Then how soon a request waiting in one process gets a slot freed in another (two coordinators with
their own clients, a backend of limit 1): woken by the release's announcement (pub/sub), against
the pump's poll alone (0.5 s), interleaved, `--wakes` times each; median and P90.

    python -m loadtests.bench_scaleout [--rounds 5] [--seconds 4] [--docs docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gateway.control.window import nearest_rank
from gateway.coordination.pump import SlotPump
from gateway.coordination.shared_slots import SharedSlot
from loadtests.bench_proxy import have_wrk, spawn_sim, wrk
from loadtests.doc_tables import write_block
from loadtests.proc_cpu import process_seconds
from tests.procs import Proc, free_port, spawn
from tests.redis_server import RedisServer, running_redis


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of `pid` and, recursively, its children."""
    return process_seconds(pid, descendants=True)


def serve(config: dict[str, object], workers: int = 1) -> Proc:
    """`llm-gateway serve` with `config` on a free loopback port (listen is filled in), `--workers`
    when more than one; ready once /health answers."""
    port = free_port()
    config = {**config, "listen": {"host": "127.0.0.1", "port": port}}
    fd, path = tempfile.mkstemp(suffix=".yaml", prefix="gateway-")
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f)
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "gateway.cli", "serve", "--config", path, "--log-level", "warning"]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    try:
        return spawn(cmd, f"{base}/health", 30.0, base_url=base)
    finally:
        os.unlink(path)


def gateway(sim: Proc, redis: RedisServer | None, workers: int) -> Proc:
    config: dict[str, object] = {
        "backends": [{"url": sim.url, "name": "sim", "max_concurrency": 4096}],
        "controller": {"algorithm": "fixed", "params": {"limit": 4096}},
        "queue": {"max_depth": 8192},
    }
    if redis is not None:
        config["state"] = {"redis_url": redis.url, "namespace": f"bench{workers}"}
    return serve(config, workers)


class _OneWaiter:
    """The waiting side of one backend with one request at most: it takes a lease when it wants one."""

    def __init__(self) -> None:
        self.wants = False
        self.got = asyncio.Event()
        self.taken: list[SharedSlot] = []
        self.pump: SlotPump | None = None

    def next_tenant(self) -> str | None:
        return "t" if self.wants else None

    def room(self) -> int:
        return 1

    def hand_out(self) -> None:
        assert self.pump is not None
        lease = self.pump.take()
        if lease is not None and self.wants:
            self.wants = False
            self.taken.append(lease)
            self.got.set()


async def wake_latency(redis: RedisServer, announced: bool, n: int) -> list[float]:
    """Seconds from a release in one process to the hand-out in the other, `n` times."""
    from gateway.coordination.connection import connect
    from gateway.coordination.coordinator import Coordinator
    from gateway.coordination.scripts import Keys
    from gateway.coordination.wakeups import ReleaseListener

    keys = Keys(f"wake-{announced}")
    holder = Coordinator(connect(redis.url), ["b"], clock=time.monotonic, keys=keys)
    waiter = Coordinator(connect(redis.url), ["b"], clock=time.monotonic, keys=keys)
    await holder.step()
    await waiter.step()
    demand = _OneWaiter()
    pump = demand.pump = SlotPump("b", waiter.slots, demand, limit=lambda: 1, weight=lambda t: 1.0)
    got, taken = demand.got, demand.taken
    tasks = [asyncio.create_task(pump.run()), asyncio.create_task(pump.run_releases())]
    if announced:
        listener = ReleaseListener(waiter.redis, ["b"], lambda b: pump.nudge(), keys=keys)
        tasks.append(asyncio.create_task(listener.run()))
        while (await waiter.redis.pubsub_numsub(keys.released_channel("b")))[0][1] == 0:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    took = []
    try:
        for _ in range(n):
            held = await holder.slots.try_acquire_fair("b", "t", 1, weight=1.0, waiting_seconds=1.0)
            assert held is not None
            got.clear()
            demand.wants = True
            pump.nudge()
            await asyncio.sleep(0.05)  # the waiter was refused and sleeps until woken
            started = time.perf_counter()
            await holder.slots.release(held)
            await got.wait()
            took.append(time.perf_counter() - started)
            pump.give_back(taken.pop())
            await pump.flush()
    finally:
        for task in tasks:
            task.cancel()
        await holder.close()
        await waiter.close()
    return took


def spread(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


NAMES = ["1 process, no Redis", "--workers 1 + Redis", "--workers 2 + Redis"]


@dataclass
class PathCost:
    """Per gateway, one value a round: P50 at concurrency 1, req/s at 32, CPU per request."""

    p50: dict[str, list[float]] = field(default_factory=lambda: {n: [] for n in NAMES})
    rps: dict[str, list[float]] = field(default_factory=lambda: {n: [] for n in NAMES})
    cpu: dict[str, list[float]] = field(default_factory=lambda: {n: [] for n in NAMES})
    redis_cpu: dict[str, list[float]] = field(default_factory=lambda: {n: [] for n in NAMES})


def measure_paths(rounds: int, seconds: float) -> PathCost:
    """The three gateways in front of one `instant` simulator, measured in turn over `rounds`."""
    cost = PathCost()
    with running_redis() as redis, spawn_sim() as sim:
        gateways = {
            NAMES[0]: gateway(sim, None, 1),
            NAMES[1]: gateway(sim, redis, 1),
            NAMES[2]: gateway(sim, redis, 2),
        }
        try:
            for gw in gateways.values():
                wrk(gw.url, 32, 2)  # warm-up: connection pools, scripts loaded, code paths
            for _ in range(rounds):
                for name, gw in gateways.items():
                    cost.p50[name].append(wrk(gw.url, 1, seconds)[1])
                    assert redis.pid is not None
                    before, redis_before = cpu_seconds(gw.pid), cpu_seconds(redis.pid)
                    rate, _ = wrk(gw.url, 32, seconds)
                    requests = rate * round(seconds)
                    cost.rps[name].append(rate)
                    cost.cpu[name].append((cpu_seconds(gw.pid) - before) / requests)
                    cost.redis_cpu[name].append((cpu_seconds(redis.pid) - redis_before) / requests)
        finally:
            for gw in gateways.values():
                gw.stop()
    return cost


def path_table(cost: PathCost) -> list[str]:
    base = statistics.median(cost.p50[NAMES[0]])
    one = statistics.median(cost.rps[NAMES[1]])
    lines = [
        "| gateway | P50 at concurrency 1 | added P50 | req/s at concurrency 32 | vs --workers 1 "
        "| gateway CPU per request | redis-server CPU per request |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in NAMES:
        lines.append(
            f"| {name} | {spread([v * 1e3 for v in cost.p50[name]], '.3f')} ms "
            f"| {(statistics.median(cost.p50[name]) - base) * 1e3:+.3f} ms "
            f"| {spread(cost.rps[name], ',.0f')} | {statistics.median(cost.rps[name]) / one:.2f}x "
            f"| {spread([v * 1e3 for v in cost.cpu[name]], '.3f')} ms "
            f"| {spread([v * 1e3 for v in cost.redis_cpu[name]], '.3f')} ms |"
        )
    return lines


def wake_table(wakes_each: int) -> list[str]:
    """Announced against polled wake-ups, interleaved twice."""
    wakes: dict[bool, list[float]] = {True: [], False: []}
    with running_redis() as redis:
        for _ in range(2):
            for announced in (True, False):
                wakes[announced] += asyncio.run(wake_latency(redis, announced, wakes_each // 2))
    lines = [
        "| a slot freed in another process reaches a waiting request | median | P90 |",
        "|---|---|---|",
    ]
    for announced, label in (
        (True, "announced (pub/sub), poll as safety net"),
        (False, "poll alone (0.5 s)"),
    ):
        values = sorted(wakes[announced])
        p90 = nearest_rank(values, 0.9) or 0.0
        lines.append(f"| {label} | {statistics.median(values) * 1e3:.2f} ms | {p90 * 1e3:.2f} ms |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--wakes", type=int, default=40)
    parser.add_argument("--docs", type=Path, help="also write the table into this document's block")
    args = parser.parse_args()
    if not have_wrk():
        return 2
    lines = [*path_table(measure_paths(args.rounds, args.seconds)), "", *wake_table(args.wakes)]
    table = "\n".join(lines)
    print(table)
    if args.docs is not None:
        write_block(args.docs, "bench-scaleout", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
