"""Several gateway processes share one backend's admission through one real redis-server.

Three `llm-gateway serve` processes (real processes, loopback) name the same Redis and the same
simulated vLLM, with a fixed limit of 4. The backend's own count of the requests it holds
(`vllm:num_requests_running` + `waiting`, sampled while the load runs) is the judge of the shared
in-flight count: it never passes the limit although each replica alone would admit 4. Then: a
replica killed with SIGKILL frees its slots within the lease time; Redis stopped and started
again (the replicas fall back to a local share, say so, and share again); two tenants flooding
two different replicas get their weighted shares of the backend; one controller (the leader's)
decides from the other replicas' traffic and they adopt its limit; and two backends behind three
replicas of `--workers 2` each (six processes) are each filled to their limit and never past it,
answer no request with an error and keep no lease once the load is over.

Marked `slow` and `serial`: real processes under load for a few seconds each, about 1 min together on the
2-core machine (each test starts its own replicas, so a killed or cut-off one cannot affect the next).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.procs import Proc, spawn_gateways, spawn_sim
from tests.redis_server import RedisServer, running_redis

pytestmark = [pytest.mark.slow, pytest.mark.serial]

LIMIT = 4
LEASE_SECONDS = 3.0
MODEL = "tiny-llama"
TENANTS = [
    {"name": "light", "api_keys": ["key-light"], "weight": 1},
    {"name": "heavy", "api_keys": ["key-heavy"], "weight": 3},
]


def gateway_config(sim: Proc, redis: RedisServer, namespace: str) -> dict[str, object]:
    return {
        "backends": [{"url": sim.url, "name": "sim"}],
        "controller": {"algorithm": "fixed", "params": {"limit": LIMIT}},
        "queue": {"max_depth": 200, "timeout": 30},
        "health": {"interval": 0.5},
        "tenants": TENANTS,
        "state": {"redis_url": redis.url, "lease_seconds": LEASE_SECONDS, "namespace": namespace},
    }


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    with spawn_sim("--profile", "tiny-cpu") as proc:
        yield proc


def replicas(sim: Proc, redis: RedisServer, namespace: str, n: int = 3) -> list[Proc]:
    return spawn_gateways(gateway_config(sim, redis, namespace), n)


def _engine_holds(text: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{")):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def one(client: httpx.AsyncClient, base: str, key: str, tokens: int) -> int:
    body = {"model": MODEL, "prompt": "hello", "max_tokens": tokens, "ignore_eos": True, "stream": True}
    # Users that would rather wait than be refused: they queue for the slots the others hold.
    headers = {"Authorization": f"Bearer {key}", "x-queue-timeout": "30"}
    async with client.stream("POST", f"{base}/v1/completions", json=body, headers=headers) as resp:
        async for _ in resp.aiter_bytes():
            pass
        return resp.status_code


async def closed_loop(
    client: httpx.AsyncClient,
    base: str,
    key: str,
    users: int,
    until: float,
    tokens: int,
    done: dict[str, Any],
) -> None:
    async def user() -> None:
        while time.monotonic() < until:
            try:
                status = await one(client, base, key, tokens)
            except httpx.TransportError:
                status = -1
            done.setdefault(key, {}).setdefault(status, 0)
            done[key][status] += 1

    await asyncio.gather(*(user() for _ in range(users)))


async def sample_engine(client: httpx.AsyncClient, sim: Proc, until: float) -> list[float]:
    seen: list[float] = []
    while time.monotonic() < until:
        seen.append(_engine_holds((await client.get(f"{sim.url}/metrics")).text))
        await asyncio.sleep(0.01)
    return seen


def state(gw: Proc) -> dict[str, Any]:
    got: dict[str, Any] = httpx.get(f"{gw.url}/admin/state", timeout=10).json()
    return got


def settle(gateways: list[Proc], sim: Proc, timeout: float = 15.0) -> None:
    """Wait until nothing is in flight or queued anywhere (nothing leaked)."""
    deadline = time.monotonic() + timeout
    while True:
        states = [state(gw) for gw in gateways]
        inflight = [s["backends"][0]["inflight"] for s in states]
        shared = [s["coordination"]["backends"]["sim"]["shared_inflight"] for s in states]
        depth = [s["models"][MODEL]["depth"] if MODEL in s["models"] else 0 for s in states]
        engine = _engine_holds(httpx.get(f"{sim.url}/metrics").text)
        if not any(inflight) and not any(depth) and engine == 0 and not any(shared):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"in flight {inflight}, shared {shared}, queued {depth}, engine {engine}")
        time.sleep(0.2)  # polling a condition across processes, bounded by the deadline


def test_replicas_together_never_pass_the_backends_limit(sim: Proc, redis: RedisServer) -> None:
    gateways = replicas(sim, redis, "limit")
    try:

        async def exhausted(client: httpx.AsyncClient, until: float) -> list[bool]:
            """Whether each replica says so while requests wait and the limit is held elsewhere."""
            await asyncio.sleep(2.0)
            states = [(await client.get(f"{gw.url}/admin/state")).json() for gw in gateways]
            return [s["models"][MODEL]["capacity_exhausted"] for s in states]

        async def run() -> tuple[list[float], dict[str, Any], list[bool]]:
            until = time.monotonic() + 4.0
            done: dict[str, Any] = {}
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=100)) as client:
                loads = [closed_loop(client, gw.url, "key-light", 8, until, 30, done) for gw in gateways]
                seen, said, *_ = await asyncio.gather(
                    sample_engine(client, sim, until), exhausted(client, until), *loads
                )
            return seen, done, said

        seen, done, said = asyncio.run(run())
        assert max(seen) <= LIMIT, max(seen)
        assert max(seen) == LIMIT  # the limit was reached: the replicas were not starved
        assert set(done["key-light"]) == {200}, done
        assert any(said), said  # gateway_capacity_exhausted: each holds < 4 here, but all 4 are taken
        settle(gateways, sim)
    finally:
        for gw in gateways:
            gw.stop()


def _metric(gw: Proc, name: str) -> float:
    for line in httpx.get(f"{gw.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


def test_a_replica_killed_frees_its_slots_within_the_lease_time(sim: Proc, redis: RedisServer) -> None:
    import redis as redis_client

    gateways = replicas(sim, redis, "kill")
    victim, survivors = gateways[2], gateways[:2]
    owner = state(victim)["coordination"]["owner"]
    direct = redis_client.Redis.from_url(redis.url, decode_responses=True)
    try:

        def dead_leases() -> int:
            """The victim's leases still in force (an expired one no longer counts against the limit:
            the next acquire purges it before counting)."""
            seconds, micros = direct.time()
            now_ms = seconds * 1000 + micros // 1000
            live = direct.zrangebyscore("{kill}:slots:sim", now_ms + 1, "+inf")
            return sum(1 for m in live if m.startswith(owner + "#"))

        async def run() -> tuple[float, dict[str, Any]]:
            until = time.monotonic() + LEASE_SECONDS + 5.0
            done: dict[str, Any] = {}
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=100)) as client:
                loads = [
                    asyncio.create_task(closed_loop(client, gw.url, "key-light", 6, until, 200, done))
                    for gw in survivors
                ]
                victim_load = asyncio.create_task(
                    closed_loop(client, victim.url, "key-heavy", 6, until, 2000, {})
                )
                while not dead_leases():  # noqa: ASYNC110 - the victim holds slots mid-load
                    await asyncio.sleep(0.02)
                os.kill(victim.pid, signal.SIGKILL)
                killed = time.monotonic()
                while dead_leases():  # noqa: ASYNC110 - state in another process's Redis
                    await asyncio.sleep(0.05)
                freed_after = time.monotonic() - killed
                await asyncio.gather(*loads)
                victim_load.cancel()
                await asyncio.gather(victim_load, return_exceptions=True)
            return freed_after, done

        freed_after, done = asyncio.run(run())
        assert freed_after <= LEASE_SECONDS + 1.0, freed_after
        assert set(done["key-light"]) == {200} and done["key-light"][200] > 10, done
        settle(survivors, sim)
    finally:
        direct.close()
        for gw in gateways:
            gw.stop()


def test_redis_stopped_and_started_again(sim: Proc, redis: RedisServer) -> None:
    gateways = replicas(sim, redis, "outage")
    try:

        async def run() -> tuple[list[float], list[dict[str, Any]], list[float], list[str], dict[str, Any]]:
            done: dict[str, Any] = {}
            until = time.monotonic() + 9.0
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=100)) as client:
                loads = [
                    asyncio.create_task(closed_loop(client, gw.url, "key-light", 6, until, 30, done))
                    for gw in gateways
                ]
                await asyncio.sleep(1.0)
                redis.stop()
                stopped = time.monotonic()
                seen = await sample_engine(client, sim, stopped + 1.0)
                settled = await sample_engine(client, sim, stopped + 2.0)
                during = [state(gw)["coordination"] for gw in gateways]
                up = [_metric(gw, "gateway_coordination_up") for gw in gateways]
                redis.start()
                deadline = time.monotonic() + LEASE_SECONDS + 3.0
                while True:
                    modes = [state(gw)["coordination"]["mode"] for gw in gateways]
                    if modes == ["shared"] * 3 or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.1)
                await asyncio.gather(*loads)
            return seen, settled, during, up, modes, done

        seen, settled, during, up, modes, done = asyncio.run(run())
        assert [c["mode"] for c in during] == ["fallback"] * 3, during
        assert up == [0.0, 0.0, 0.0]
        # Each replica admits up to 4 // 3 = 1 on its own: never unlimited, never stopped. While
        # the requests admitted before the loss still run (30 tokens, well under a second), a
        # replica that holds none of them may take its share beside them.
        assert max(seen) <= LIMIT + 3 * (LIMIT // 3), seen
        assert 0 < max(settled) <= 3 * (LIMIT // 3), settled
        assert modes == ["shared"] * 3
        assert set(done["key-light"]) == {200}, done
        settle(gateways, sim)
    finally:
        for gw in gateways:
            gw.stop()


def test_tenants_get_their_weighted_shares_across_replicas(sim: Proc, redis: RedisServer) -> None:
    gateways = replicas(sim, redis, "fair", n=2)
    try:

        async def held(client: httpx.AsyncClient, gw: Proc) -> int:
            got = (await client.get(f"{gw.url}/admin/state")).json()
            return int(got["backends"][0]["inflight"])

        async def run() -> tuple[list[tuple[int, int]], dict[str, Any]]:
            done: dict[str, Any] = {}
            samples: list[tuple[int, int]] = []
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=100)) as client:
                until = time.monotonic() + 6.0
                # Both tenants flood the backend, each through its own replica: light (weight 1)
                # through the first, heavy (weight 3) through the second. Each replica's in-flight
                # count is its tenant's hold on the backend; sampled after a warm-up second.
                loads = asyncio.gather(
                    closed_loop(client, gateways[0].url, "key-light", 10, until, 60, done),
                    closed_loop(client, gateways[1].url, "key-heavy", 10, until, 60, done),
                )
                await asyncio.sleep(1.0)
                while time.monotonic() < until - 0.5:
                    samples.append((await held(client, gateways[0]), await held(client, gateways[1])))
                    await asyncio.sleep(0.02)
                await loads
            return samples, done

        samples, done = asyncio.run(run())
        light, heavy = sum(s[0] for s in samples), sum(s[1] for s in samples)
        assert abs(heavy / (light + heavy) - 0.75) <= 0.10, (light, heavy)
        assert done["key-light"][200] > 5 and done["key-heavy"][200] > 5, done
        settle(gateways, sim)
    finally:
        for gw in gateways:
            gw.stop()


def test_one_controller_decides_from_every_replicas_traffic(sim: Proc, redis: RedisServer) -> None:
    config = gateway_config(sim, redis, "leader")
    config["backends"] = [{"url": sim.url, "name": "sim", "max_concurrency": 6}]
    config["controller"] = {"algorithm": "aimd", "params": {"initial": 2}, "interval": 0.2}
    config["sla"] = {"ttft_p90": 30.0}
    gateways = spawn_gateways(config, 3)
    try:
        states = [state(gw) for gw in gateways]
        leaders = [gw for gw, s in zip(gateways, states, strict=True) if s["coordination"]["leading"]]
        assert len(leaders) == 1
        leader = leaders[0]
        followers = [gw for gw in gateways if gw is not leader]

        async def run() -> dict[str, Any]:
            done: dict[str, Any] = {}
            until = time.monotonic() + 3.0
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=100)) as client:
                # Traffic through the followers only: the leader serves nothing itself.
                await asyncio.gather(
                    *(closed_loop(client, gw.url, "key-light", 8, until, 20, done) for gw in followers)
                )
            return done

        done = asyncio.run(run())
        assert set(done["key-light"]) == {200}
        ours = state(leader)["backends"][0]
        # It rose: aimd raises a limit only on `min_samples` finished requests since the last change
        # and while the limit binds (in flight or queued). The leader served nothing itself (no
        # queue for the model was ever made there): the evidence was the followers'.
        assert ours["controlled"] > 2
        assert MODEL not in state(leader)["models"]
        # The followers adopt the leader's limit: the one it holds now, since a tick that ran late
        # on the last samples of the load may still have moved it since `ours` was read.
        deadline = time.monotonic() + 5.0
        while True:
            theirs = [state(gw)["backends"][0]["controlled"] for gw in followers]
            leaders_limit = state(leader)["backends"][0]["controlled"]
            if theirs == [leaders_limit] * 2:
                break
            assert time.monotonic() < deadline, (leaders_limit, theirs)
            time.sleep(0.1)
        assert leaders_limit > 2
    finally:
        for gw in gateways:
            gw.stop()


SHARED_LIMIT = 6
"""Each backend's limit behind six processes. A multiple of six: if a starved process still drops
into the fallback, its share max(1, 6 // 6) = 1 keeps the six together at the limit, where with a
smaller limit the floor of one each would pass it; and each process alone would admit all six."""


def test_two_backends_behind_three_replicas_of_two_workers_each(redis: RedisServer) -> None:
    import redis as redis_client

    def start(sims: list[Proc]) -> list[Proc]:
        config = {
            "backends": [{"url": s.url, "name": f"sim{i}"} for i, s in enumerate(sims)],
            "controller": {"algorithm": "fixed", "params": {"limit": SHARED_LIMIT}},
            "queue": {"max_depth": 200, "timeout": 30},
            "health": {"interval": 0.5},
            # A starved test machine is not a Redis outage: a longer command timeout keeps the
            # six processes out of the fallback, so what is judged is the shared count.
            "state": {"redis_url": redis.url, "lease_seconds": 6.0, "timeout": 1.5, "namespace": "six"},
        }
        return spawn_gateways(config, 3, timeout=30.0, ready_path="/health", args=["--workers", "2"])

    with spawn_sim("--profile", "tiny-cpu") as a, spawn_sim("--profile", "tiny-cpu") as b:
        sims = [a, b]
        gateways: list[Proc] = []
        direct = redis_client.Redis.from_url(redis.url, decode_responses=True)
        try:
            gateways += start(sims)

            async def run() -> tuple[list[list[float]], dict[str, Any]]:
                until = time.monotonic() + 4.0
                done: dict[str, Any] = {}
                async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=100)) as client:
                    # 24 users for 12 slots: every replica queues for slots the others hold.
                    loads = [closed_loop(client, gw.url, "k", 8, until, 30, done) for gw in gateways]
                    *seen, _, _, _ = await asyncio.gather(
                        *(sample_engine(client, s, until) for s in sims), *loads
                    )
                return seen, done

            seen, done = asyncio.run(run())
            peaks = [max(s) for s in seen]
            assert peaks == [SHARED_LIMIT] * 2, peaks  # each backend full, never over
            assert set(done["k"]) == {200}, done
            deadline = time.monotonic() + 15
            while direct.zcard("{six}:slots:sim0") + direct.zcard("{six}:slots:sim1") > 0:
                assert time.monotonic() < deadline, "leases left after the load"
                time.sleep(0.2)  # polling state in another process, bounded by the deadline
        finally:
            direct.close()
            for gw in gateways:
                gw.stop()
