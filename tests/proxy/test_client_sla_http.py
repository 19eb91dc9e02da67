"""The SLA as the client sees it, end to end: the real `openai` SDK -> gateway -> simulated vLLM on
loopback. A request that cannot be served within its TTFT budget is refused 429 with honest retry
advice and never reaches the engine; one that asks to wait (`x-queue-timeout`) waits; a model's own
target replaces the default; an engine that refuses work as busy never makes a client see its 503;
and every judged request is counted under `gateway_sla_requests_total`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest

from tests.procs import Proc, spawn_gateway, spawn_sim

MODEL = "tiny-llama"


def chat(client: openai.OpenAI, **extra: Any) -> str:
    """One streamed chat completion; its text."""
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello there"}],
        max_tokens=4,
        stream=True,
        **extra,
    )
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


@contextmanager
def in_background(call: Callable[[], object]) -> Iterator[list[object]]:
    """Run `call` in a thread; yields the list its result (or exception) lands in; joins on exit."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(call())
        except Exception as exc:
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield out
    finally:
        thread.join(timeout=60)


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def inflight(gw: Proc) -> int:
    return int(httpx.get(f"{gw.url}/admin/state").json()["backends"][0]["inflight"])


def metric(url: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels` (0 when there is none)."""
    total = 0.0
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def one_slot(sim: Proc, sla: dict[str, object]) -> dict[str, object]:
    return {
        "backends": [{"url": sim.url, "name": "a"}],
        "controller": {"algorithm": "fixed", "params": {"limit": 1}},
        "sla": sla,
    }


@pytest.fixture
def slow_sim() -> Iterator[Proc]:
    """A simulated vLLM whose API server holds every request 1.5 s before its engine sees it."""
    with spawn_sim("--profile", "tiny-cpu", "--frontend-delay", "1.5") as sim:
        yield sim


def test_a_waiter_whose_budget_runs_out_gets_429_with_retry_advice_and_never_reaches_the_engine(
    slow_sim: Proc,
) -> None:
    with spawn_gateway(one_slot(slow_sim, {"ttft_p90": 0.4})) as gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
        with in_background(lambda: chat(client)) as first:
            wait_for(lambda: inflight(gw) == 1, "the first request to take the only slot")
            with pytest.raises(openai.RateLimitError) as refused:
                chat(client)
        assert isinstance(first[0], str)
        err = refused.value
        assert err.status_code == 429 and err.code == "deadline"
        assert "budget" in err.message
        headers = err.response.headers
        assert float(headers["retry-after-ms"]) > 0 and int(headers["retry-after"]) >= 1
        # Only the first request reached the engine.
        assert metric(slow_sim.url, "vllm:request_success_total") == 1
        counts = {
            r: metric(gw.url, "gateway_sla_requests_total", model=MODEL, result=r)
            for r in ("met", "missed", "refused")
        }
        # The first one's client TTFT (1.5 s of front end) missed 0.4 s; the second was refused.
        assert counts == {"met": 0, "missed": 1, "refused": 1}


def test_x_queue_timeout_waits_past_the_budget_and_is_not_judged(slow_sim: Proc) -> None:
    with spawn_gateway(one_slot(slow_sim, {"ttft_p90": 0.4})) as gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
        with in_background(lambda: chat(client)) as first:
            wait_for(lambda: inflight(gw) == 1, "the first request to take the only slot")
            patient = chat(client, extra_headers={"x-queue-timeout": "20"})
        assert isinstance(first[0], str) and patient
        assert metric(slow_sim.url, "vllm:request_success_total") == 2
        judged = metric(gw.url, "gateway_sla_requests_total", model=MODEL)
        assert judged == 1  # the first one only: the patient one chose to wait


def test_a_models_own_target_replaces_the_default(slow_sim: Proc) -> None:
    sla = {"ttft_p90": 0.4, "models": {MODEL: {"ttft_p90": 20.0}}}
    with spawn_gateway(one_slot(slow_sim, sla)) as gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
        with in_background(lambda: chat(client)) as first:
            wait_for(lambda: inflight(gw) == 1, "the first request to take the only slot")
            second = chat(client)  # waits for the slot: 20 s of budget
        assert isinstance(first[0], str) and second
        assert metric(gw.url, "gateway_client_sla_target_seconds", model=MODEL, signal="ttft") == 20.0
        assert metric(gw.url, "gateway_sla_requests_total", model=MODEL, result="met") == 2
        p90 = metric(gw.url, "gateway_client_ttft_p90_seconds", model=MODEL)
        assert p90 > 2.0  # its own 1.5 s in the front end, and its wait for the first one


@pytest.mark.serial
def test_an_engine_busy_503_is_waited_out_never_passed_to_the_client() -> None:
    with spawn_sim("--profile", "tiny-cpu", "--max-num-queued-reqs", "2", "--frontend-delay", "0.3") as sim:
        config = {
            "backends": [{"url": sim.url, "name": "a", "max_concurrency": 8}],
            "controller": {"algorithm": "fixed", "params": {"limit": 6}},
            "sla": {"ttft_p90": 30.0},
        }
        with spawn_gateway(config) as gw:
            client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
            results: list[object] = []
            threads = [
                threading.Thread(target=lambda: results.append(_catching(lambda: chat(client))))
                for _ in range(6)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert len(results) == 6 and all(isinstance(r, str) and r for r in results), results
            state = httpx.get(f"{gw.url}/admin/state").json()["backends"][0]
            assert state["ceiling"] < 6 and state["healthy"]  # lowered by what the engine refused
            assert metric(gw.url, "gateway_requests_total", status="503") == 0


def _catching(call: Callable[[], object]) -> object:
    try:
        return call()
    except Exception as exc:
        return exc
