"""A separate process that takes leases, for the tests that need more than one process.

python -m tests.coordination.lease_worker URL NAMESPACE churn LIMIT CYCLES
    Takes and releases slots on backend "b" as fast as it can (8 coroutines); while holding one
    it INCRs a probe key and DECRs it before releasing, an independent count of holders across
    processes. Prints "max=<highest probe value seen> granted=<slots granted>".
python -m tests.coordination.lease_worker URL NAMESPACE hold COUNT LEASE_SECONDS
    Takes COUNT slots, prints "held", renews every lease/3 until killed.
"""

from __future__ import annotations

import asyncio
import sys

from gateway.coordination.connection import connect
from gateway.coordination.coordinator import make_owner
from gateway.coordination.redis_slots import RedisSlots
from gateway.coordination.scripts import Keys


async def churn(url: str, keys: Keys, limit: int, cycles: int) -> None:
    redis = connect(url, timeout=5.0)
    slots = RedisSlots(redis, make_owner(), keys=keys)
    probe = f"{{{keys.namespace}}}:probe"
    highest = granted = 0

    async def one() -> None:
        nonlocal highest, granted
        for _ in range(cycles):
            lease = await slots.try_acquire("b", "t", limit)
            if lease is None:
                await asyncio.sleep(0)
                continue
            granted += 1
            highest = max(highest, int(await redis.incr(probe)))
            await redis.decr(probe)
            await slots.release(lease)

    await asyncio.gather(*(one() for _ in range(8)))
    await redis.aclose()
    print(f"max={highest} granted={granted}", flush=True)


async def hold(url: str, keys: Keys, count: int, lease_seconds: float) -> None:
    redis = connect(url, timeout=5.0)
    slots = RedisSlots(redis, make_owner(), keys=keys, lease_seconds=lease_seconds)
    for _ in range(count):
        assert await slots.try_acquire("b", "t", count) is not None
    print("held", flush=True)
    while True:
        await slots.renew()
        await asyncio.sleep(lease_seconds / 3)


def main(argv: list[str]) -> None:
    url, namespace, mode, a, b = argv
    keys = Keys(namespace)
    if mode == "churn":
        asyncio.run(churn(url, keys, int(a), int(b)))
    else:
        asyncio.run(hold(url, keys, int(a), float(b)))


if __name__ == "__main__":
    main(sys.argv[1:])
