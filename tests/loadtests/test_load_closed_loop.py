"""The closed-loop load generator against real HTTP servers: the simulated engine, and the gateway
with a fixed limit in front of it (so that some requests wait in its queue)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from loadtests import closed_loop
from tests.procs import Proc, spawn_gateway, spawn_sim


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    with spawn_sim("--profile", "tiny-cpu") as proc:
        yield proc


def test_lengths_fit_the_model_and_a_shared_prefix_starts_every_prompt() -> None:
    workload = closed_loop.Workload(
        clients=1,
        duration_s=1.0,
        endpoint="chat",
        prompt_tokens=(700, 800),
        output_tokens=(300, 400),
        shared_prefix_tokens=600,
        max_model_len=1024,
    )
    rng = random.Random(1)
    prefix = closed_loop.digits(random.Random(2), 600)
    for _ in range(20):
        path, body = closed_loop.request_body(workload, rng, prefix)
        text = body["messages"][0]["content"]
        assert path == "/v1/chat/completions" and text.startswith(prefix)
        assert 700 <= len(text) <= 800
        assert len(text) + body["max_tokens"] + closed_loop.TEMPLATE_MARGIN <= 1024
        assert body["ignore_eos"] and body["stream"]


@pytest.mark.parametrize(("endpoint", "stream"), [("chat", False), ("completions", True)])
def test_through_a_gateway_records_tokens_and_queue_wait(sim: Proc, endpoint: str, stream: bool) -> None:
    config = {"backends": [sim.url], "controller": {"algorithm": "fixed", "params": {"limit": 1}}}
    workload = closed_loop.Workload(
        clients=3,
        duration_s=2.0,
        warmup_s=0.5,
        model="tiny-llama",
        endpoint=endpoint,
        stream=stream,
        prompt_tokens=(20, 40),
        output_tokens=(8, 16),
    )
    with spawn_gateway(config) as gateway:
        result = closed_loop.run_sync(gateway.url, workload)
    done = result.ok
    assert done and result.failures == 0
    assert all(r.completion_tokens == r.max_tokens for r in done)
    # Three clients share one slot: most requests waited in the gateway's queue, and the
    # header says how long, which the latencies the SLA judges leave out.
    assert max(r.queue_wait for r in done) > 0.0
    for r in done:
        assert r.end is not None and r.queue_wait <= r.end - r.start
    assert all((r.first_token is not None) == stream for r in done)
    # Requests cut off at the end of the window are cancelled, not counted as failures.
    assert all(r.end is not None for r in result.records)
    assert result.tokens_per_s() > 0.0
    assert 0.0 < result.cpu_share() < 1.0
