"""A token quota shared by three gateway processes through a real Redis, and each one's share
while Redis is stopped."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.procs import Proc, spawn_gateway, spawn_sim
from tests.redis_server import RedisServer, running_redis
from tests.tenancy.helpers import metric, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TPM = 3000
PROMPT = "quota " * 80  # about 120 tokens with the chat template


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    with spawn_sim("--profile", "instant", "--model", "m") as proc:
        yield proc


def replicas(sim: Proc, redis: RedisServer) -> list[Proc]:
    config = {
        "backends": [{"url": sim.url, "name": "sim"}],
        "tenants": [{"name": "team", "api_keys": ["key-t"], "tokens_per_minute": TPM}],
        "state": {"redis_url": redis.url, "lease_seconds": 3.0, "namespace": "quota"},
    }
    started: list[Proc] = []
    try:
        for _ in range(3):
            started.append(spawn_gateway(config, timeout=60))
    except BaseException:
        for proc in started:
            proc.stop()
        raise
    return started


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


def asker(http: httpx.Client) -> Callable[[Proc], httpx.Response]:
    def ask(gw: Proc) -> httpx.Response:
        return http.post(
            f"{gw.url}/v1/chat/completions",
            headers={"authorization": "Bearer key-t"},
            json={"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 30},
        )

    return ask


def test_three_gateways_spend_one_token_quota_and_each_its_share_without_redis(
    sim: Proc, redis: RedisServer, http: httpx.Client
) -> None:
    ask = asker(http)
    gateways = replicas(sim, redis)
    try:

        def replicas_seen() -> bool:
            counts = [
                httpx.get(f"{gw.url}/admin/state").json()["coordination"]["replicas"] for gw in gateways
            ]
            return counts == [3, 3, 3]

        wait_for("every gateway to count three replicas", replicas_seen)
        started = time.monotonic()
        served = refused = 0
        for i in range(60):  # about 9,000 tokens asked for: three times the quota
            r = ask(gateways[i % 3])
            if r.status_code == 200:
                usage = r.json()["usage"]
                served += usage["prompt_tokens"] + usage["completion_tokens"]
            else:
                assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"
                refused += 1
        elapsed = time.monotonic() - started
        # One bucket for all three: a full bucket plus its refill over the run, plus at most one
        # request's output past it. Three buckets of their own would have served three times as much.
        assert served <= TPM + elapsed * TPM / 60 + 200, (served, elapsed)
        assert served >= TPM * 0.8, served
        assert refused > 0

        redis.stop()
        for gw in gateways:
            r = ask(gw)  # the first call to fail puts the replica on its share
        share = TPM // 3
        for gw in gateways:
            wait_for("the local share", lambda gw=gw: metric(gw.url, "gateway_quota_local_share") == 1)
            r = ask(gw)
            assert r.headers["x-ratelimit-limit-tokens"] == str(share)
            assert "each replica enforces its share" in gw.stderr()
        # Each replica alone now serves no more than its share (plus refill and one overshoot).
        for gw in gateways:
            got = sum(
                r.json()["usage"]["total_tokens"]
                for r in (ask(gw) for _ in range(12))
                if r.status_code == 200
            )
            assert got <= share + 200, got
    finally:
        for gw in gateways:
            gw.stop()
        if redis.pid is None:
            redis.start()
