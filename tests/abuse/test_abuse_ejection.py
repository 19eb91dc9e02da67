"""Ejection takes a failing backend out only where another can serve, and says so.

The only backend of a model answering half its requests with 500 used to be ejected after three in
a row, and then requests got 503 `no_backend` (46 of 200) although the backend was answering;
5xx ejections were not logged at all. The only backend stalling long enough for three health checks
to time out was ejected too, and requests got 503 after it had caught up.
"""

from __future__ import annotations

import time
from collections import Counter

import httpx
from abuse_helpers import eventually, state

from tests.procs import Proc, spawn_gateway, spawn_sim

HEALTH = {"interval": 0.2, "failure_threshold": 3, "backoff_initial": 5.0}


def complete(gw: Proc, n: int) -> Counter[str]:
    """`n` small completions, one after another; the status of each, with the gateway's error code."""
    out: Counter[str] = Counter()
    body = {"model": "tiny-llama", "prompt": "x", "max_tokens": 2}
    with httpx.Client(base_url=gw.url, timeout=30) as client:
        for _ in range(n):
            resp = client.post("/v1/completions", json=body)
            code = resp.json().get("error", {}).get("code") if resp.status_code != 200 else None
            # vLLM's own error code is the status (an integer); the gateway's is a word.
            out[f"{resp.status_code} {code}" if isinstance(code, str) else str(resp.status_code)] += 1
    return out


def log_of(proc: Proc) -> str:
    assert proc.log is not None
    proc.log.seek(0)
    return proc.log.read().decode(errors="replace")


def test_the_only_backend_answering_errors_stays_in_rotation() -> None:
    with (
        spawn_sim("--profile", "tiny-cpu", "--error-rate", "0.5", "--seed", "3") as sim,
        spawn_gateway({"backends": [sim.url], "health": HEALTH, "retries": 0}) as gw,
    ):
        answers = complete(gw, 100)
        assert set(answers) <= {"200", "500"} and answers["500"] > 25, answers
        assert "out of rotation" not in log_of(gw)


def test_the_only_backend_stalling_past_its_health_checks_stays_and_serves_when_it_catches_up() -> None:
    with (
        spawn_sim("--profile", "tiny-cpu") as sim,
        spawn_gateway({"backends": [sim.url], "health": HEALTH, "retries": 0}) as gw,
    ):
        assert complete(gw, 2) == Counter({"200": 2})
        httpx.post(f"{sim.url}/sim/faults", json={"hang": True})
        eventually(
            lambda: state(gw)["backends"][0]["consecutive_failures"] > 3, what="health checks timing out"
        )
        assert state(gw)["backends"][0]["in_rotation"] is True
        httpx.post(f"{sim.url}/sim/faults", json={"reset": True})
        assert complete(gw, 5) == Counter({"200": 5})  # ejected, these were 503 for the backoff's 5 s
        assert "out of rotation" not in log_of(gw)


def test_a_stalling_backend_with_a_healthy_peer_is_ejected() -> None:
    with (
        spawn_sim("--profile", "tiny-cpu") as bad,
        spawn_sim("--profile", "tiny-cpu") as good,
        spawn_gateway(
            {
                "backends": [{"url": bad.url, "name": "bad"}, {"url": good.url, "name": "good"}],
                "health": HEALTH,
            }
        ) as gw,
    ):
        eventually(lambda: all(b["in_rotation"] for b in state(gw)["backends"]), what="both in rotation")
        httpx.post(f"{bad.url}/sim/faults", json={"hang": True})
        eventually(lambda: "backend bad out of rotation" in log_of(gw), what="the stalled backend ejected")
        assert "last: health check failed: TimeoutError" in log_of(gw)
        assert complete(gw, 5) == Counter({"200": 5})
        httpx.post(f"{bad.url}/sim/faults", json={"reset": True})


def test_a_failing_backend_with_a_healthy_peer_is_ejected_and_the_ejection_logged() -> None:
    with (
        spawn_sim("--profile", "tiny-cpu", "--error-rate", "1.0") as bad,
        spawn_sim("--profile", "tiny-cpu") as good,
        spawn_gateway(
            {
                "backends": [{"url": bad.url, "name": "bad"}, {"url": good.url, "name": "good"}],
                "health": HEALTH,
                "retries": 0,
            }
        ) as gw,
    ):
        complete(gw, 20)
        deadline = time.monotonic() + 5
        while "backend bad out of rotation" not in log_of(gw):
            assert time.monotonic() < deadline, log_of(gw)
            time.sleep(0.05)  # the log is written by another process
        assert "3 consecutive failures; last: request failed with 500" in log_of(gw)
        state = httpx.get(f"{gw.url}/admin/state").json()
        assert [b["in_rotation"] for b in state["backends"]] == [False, True]
        assert complete(gw, 10) == Counter({"200": 10})
