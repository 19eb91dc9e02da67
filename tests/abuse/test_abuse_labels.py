"""Clients choose model names; they must not choose metric series, nor what the gateway echoes.

While a backend has not been reached, an unknown model is answered 503 (it may exist there) and
counted: each distinct name used to become a series of its own, so 2,001 requests with 1 KB names
grew /metrics from 2.8 KB to 12.7 MB. And a name of any length was accepted and echoed back.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from gateway.proxy.request import MAX_MODEL_CHARS
from tests.procs import Proc, free_port, spawn_gateway


@pytest.fixture(scope="module")
def gateway() -> Iterator[Proc]:
    nothing_there = f"http://127.0.0.1:{free_port()}"  # never answers: its models stay unknown
    with spawn_gateway({"backends": [nothing_there], "health": {"interval": 30}}) as gw:
        yield gw


def test_two_thousand_unknown_models_leave_metrics_small(gateway: Proc) -> None:
    with httpx.Client(base_url=gateway.url, timeout=10) as client:
        before = len(client.get("/metrics").content)
        for i in range(2000):
            name = f"no-such-model-{i:04d}-" + "x" * 200
            resp = client.post("/v1/chat/completions", json={"model": name, "messages": []})
            assert resp.status_code == 503
            assert resp.json()["error"]["code"] == "no_backend"
        text = client.get("/metrics").text
    assert "no-such-model" not in text
    assert 'gateway_rejected_requests_total{model="unknown",reason="no_backend"} 2000.0' in text
    assert len(text) - before < 2_000


def test_an_overlong_model_name_is_refused_before_anything_else(gateway: Proc) -> None:
    with httpx.Client(base_url=gateway.url, timeout=10) as client:
        for size in (MAX_MODEL_CHARS + 1, 1_000_000):
            resp = client.post("/v1/completions", json={"model": "m" * size, "prompt": "hi"})
            assert resp.status_code == 400
            error = resp.json()["error"]
            assert (error["code"], error["param"], error["type"]) == (
                "model_too_long",
                "model",
                "invalid_request_error",
            )
            assert len(resp.content) < 500  # the name is not echoed
        text = client.get("/metrics").text
    assert "mmmm" not in text
