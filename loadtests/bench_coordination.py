"""What a shared slot costs: RedisSlots against the in-process count, on a real redis-server on loopback.

Modes, interleaved A B C A B C ... and repeated, each round timing `ops` operations:
- `local`: InFlight.acquire + Slot.release (what one process does without shared state);
- `redis`: RedisSlots.try_acquire + release, one script call each, with redis-py's hiredis parser;
- `redis-py-parser`: the same with redis-py's pure-Python parser (hiredis not installed).
At concurrency 1 each acquire and each release is one round trip; per mode the median over rounds
of the per-operation P50 and P90 is printed, with the spread (min-max of the round medians).
Then two costs that do not depend on the request rate: `renew` of a process holding `--held`
leases over 2 backends (one round trip), and throughput of acquire+release pairs with 32
coroutines over one client (pipelined on the pool's connections).

    python -m loadtests.bench_coordination [--rounds 7] [--ops 2000] [--held 64]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from redis._parsers import _AsyncRESP2Parser
from redis.asyncio import Redis

from gateway.control.slots import InFlight, Slot
from gateway.control.window import nearest_rank
from gateway.coordination.connection import connect
from gateway.coordination.redis_slots import RedisSlots
from gateway.coordination.scripts import Keys
from gateway.coordination.shared_slots import SlotBackend
from tests.redis_server import RedisServer

Op = Callable[[], Awaitable[None]]


def pair(slots: SlotBackend, backend: str) -> tuple[Op, Op]:
    """An acquire op and a release op that alternate on one slot."""
    held = []

    async def acquire() -> None:
        lease = await slots.try_acquire(backend, "t", 1_000_000)
        assert lease is not None
        held.append(lease)

    async def release() -> None:
        await slots.release(held.pop())

    return acquire, release


class _NoEvents:
    """The slot events a limiter would record, dropped: only the count is timed."""

    def sent(self, slot: Slot, dispatched_at: float, progress: object, most_tokens: int | None) -> None:
        pass

    def first_token(self, dispatched_at: float, ttft: float) -> None:
        pass

    def finished(self, slot: Slot, sample: object) -> None:
        pass


def local_pair() -> tuple[Op, Op]:
    """The in-process count's acquire and release, as async ops like the shared ones."""
    inflight = InFlight(1_000_000, _NoEvents())
    held: list[Slot] = []

    async def acquire() -> None:
        held.append(inflight.acquire())

    async def release() -> None:
        held.pop().release()

    return acquire, release


async def timed(ops: int, acquire: Op, release: Op) -> tuple[list[float], list[float]]:
    took_acquire, took_release = [], []
    for _ in range(ops):
        t0 = time.perf_counter()
        await acquire()
        t1 = time.perf_counter()
        await release()
        t2 = time.perf_counter()
        took_acquire.append(t1 - t0)
        took_release.append(t2 - t1)
    return sorted(took_acquire), sorted(took_release)


def us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:8.1f}"


def summary(name: str, rounds: list[list[float]]) -> str:
    p50 = [nearest_rank(r, 0.5) or 0.0 for r in rounds]
    p90 = [nearest_rank(r, 0.9) or 0.0 for r in rounds]
    return (
        f"{name:<32} P50 {us(statistics.median(p50))} us (rounds {us(min(p50))}-{us(max(p50))})"
        f"   P90 {us(statistics.median(p90))} us"
    )


async def throughput(redis: Redis, keys: Keys, coroutines: int, seconds: float) -> float:
    slots = RedisSlots(redis, "bench-throughput", keys=keys)
    done = 0
    deadline = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            lease = await slots.try_acquire("tp", "t", 1_000_000)
            assert lease is not None
            await slots.release(lease)
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(coroutines)))
    return done / (time.perf_counter() - start)


async def bench(url: str, rounds: int, ops: int, held: int) -> None:
    keys = Keys("bench")
    fast = connect(url, timeout=5.0)
    slow = Redis.from_url(url, decode_responses=True, parser_class=_AsyncRESP2Parser)
    modes: dict[str, tuple[Op, Op]] = {
        "local": local_pair(),
        "redis": pair(RedisSlots(fast, "bench-a", keys=keys), "b"),
        "redis-py-parser": pair(RedisSlots(slow, "bench-b", keys=keys), "b"),
    }
    for acquire, release in modes.values():  # warm up: connections, script cache
        await timed(200, acquire, release)
    results: dict[str, tuple[list[list[float]], list[list[float]]]] = {m: ([], []) for m in modes}
    for _ in range(rounds):
        for mode, (acquire, release) in modes.items():
            a, r = await timed(ops, acquire, release)
            results[mode][0].append(a)
            results[mode][1].append(r)
    print(f"concurrency 1, {rounds} rounds x {ops} acquire+release, interleaved by mode")
    for mode, (acq, rel) in results.items():
        print(summary(f"{mode} acquire", acq))
        print(summary(f"{mode} release", rel))

    holder = RedisSlots(fast, "bench-holder", keys=keys)
    for i in range(held):
        await holder.try_acquire(f"h{i % 2}", "t", 1_000_000)
    renewals = []
    for _ in range(rounds):
        took = []
        for _ in range(200):
            t0 = time.perf_counter()
            await holder.renew()
            took.append(time.perf_counter() - t0)
        renewals.append(sorted(took))
    print(summary(f"renew ({held} leases, 2 backends)", renewals))

    rates = [await throughput(fast, keys, 32, 1.0) for _ in range(3)]
    print(
        f"32 coroutines, one client: {statistics.median(rates):,.0f} acquire+release pairs/s "
        f"(runs {min(rates):,.0f}-{max(rates):,.0f})"
    )
    await fast.aclose()
    await slow.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--held", type=int, default=64)
    args = parser.parse_args()
    server = RedisServer()
    server.start()
    try:
        asyncio.run(bench(server.url, args.rounds, args.ops, args.held))
    finally:
        server.close()


if __name__ == "__main__":
    main()
