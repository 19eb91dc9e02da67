"""The OpenAI surface end to end: the real `openai` SDK -> gateway -> simulated vLLM, all over loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.procs import Proc, spawn_gateway, spawn_sim

MODEL = "tiny-llama"


@pytest.fixture(scope="module")
def sims() -> Iterator[list[Proc]]:
    with (
        spawn_sim("--profile", "tiny-cpu", "--seed", "1") as a,
        spawn_sim("--profile", "tiny-cpu", "--seed", "2") as b,
    ):
        yield [a, b]


@pytest.fixture(scope="module")
def gateway(sims: list[Proc]) -> Iterator[Proc]:
    config = {
        "backends": [{"url": s.url, "name": f"sim-{i}"} for i, s in enumerate(sims)],
        "health": {"interval": 0.2, "failure_threshold": 2, "backoff_initial": 0.2},
        "max_body_bytes": 64 * 1024,
    }
    with spawn_gateway(config) as gw:
        yield gw


@pytest.fixture
def client(gateway: Proc) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="client-key", max_retries=0)


def state(gateway: Proc) -> dict:  # type: ignore[type-arg]
    return httpx.get(f"{gateway.url}/admin/state").json()  # type: ignore[no-any-return]


def wait_idle(gateway: Proc, sims: list[Proc], timeout: float = 10.0) -> tuple[int, float]:
    """(gateway inflight, backend running) once both reach zero, or their values at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        inflight = sum(b["inflight"] for b in state(gateway)["backends"])
        running = sum(backend_gauge(s, "vllm:num_requests_running") for s in sims)
        if (inflight == 0 and running == 0) or time.monotonic() > deadline:
            return inflight, running
        time.sleep(0.05)


def backend_gauge(sim: Proc, name: str) -> float:
    for line in httpx.get(f"{sim.url}/metrics").text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported")


def test_models_lists_the_union_of_healthy_backends(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]


def test_chat_completion(client: openai.OpenAI) -> None:
    resp = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=5
    )
    assert resp.headers["x-gateway-backend"] in ("sim-0", "sim-1")
    assert resp.headers["x-request-id"]
    assert 0.0 <= float(resp.headers["x-gateway-queue-wait"]) < 5.0
    chat = resp.parse()
    assert chat.choices[0].message.content
    assert chat.usage is not None and chat.usage.completion_tokens <= 5


def test_request_id_is_propagated(client: openai.OpenAI) -> None:
    resp = client.completions.with_raw_response.create(
        model=MODEL, prompt="hi", max_tokens=2, extra_headers={"x-request-id": "abc-123"}
    )
    assert resp.headers["x-request-id"] == "abc-123"


def test_streaming_chat_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12


def test_completions_stream_and_not(client: openai.OpenAI) -> None:
    done = client.completions.create(model=MODEL, prompt="once upon", max_tokens=4)
    assert done.choices[0].text
    pieces = [
        c.choices[0].text
        for c in client.completions.create(model=MODEL, prompt="once upon", max_tokens=4, stream=True)
        if c.choices
    ]
    assert "".join(pieces)


def test_embeddings(client: openai.OpenAI) -> None:
    out = client.embeddings.create(model=MODEL, input=["a", "b"])
    assert len(out.data) == 2 and len(out.data[0].embedding) > 0


async def test_async_client_streams_concurrently(gateway: Proc) -> None:
    import asyncio

    aclient = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="k", max_retries=0)

    async def one(i: int) -> int:
        stream = await aclient.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": f"request {i}"}],
            max_tokens=6,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        return len([c async for c in stream if c.choices and c.choices[0].delta.content])

    counts = await asyncio.gather(*(one(i) for i in range(8)))
    assert counts == [6] * 8
    await aclient.close()


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert info.value.code == "model_not_found"


def test_backend_400_passes_through(client: openai.OpenAI) -> None:
    # The prompt is longer than the backend's max_model_len (1024 tokens at ~1 token per byte).
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="x " * 2000, max_tokens=4)
    assert "maximum context length" in str(info.value.message) or "max" in str(info.value.message)


def test_malformed_and_incomplete_bodies_are_400(gateway: Proc) -> None:
    url = f"{gateway.url}/v1/chat/completions"
    bad = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    missing = httpx.post(url, json={"messages": []})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "model"
    assert httpx.get(url).status_code == 405


def test_oversized_body_is_413(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        client.completions.create(model=MODEL, prompt="x" * 100_000, max_tokens=1)
    assert info.value.status_code == 413
    assert info.value.code == "request_too_large"


def test_client_disconnect_mid_stream_frees_everything(gateway: Proc, sims: list[Proc]) -> None:
    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": "long"}],
            "stream": True,
            "max_tokens": 600,
            "ignore_eos": True,
        },
    ) as resp:
        got = 0
        for line in resp.iter_lines():
            got += line.startswith("data: {")
            if got == 3:
                assert sum(b["inflight"] for b in state(gateway)["backends"]) == 1
                assert sum(backend_gauge(s, "vllm:num_requests_running") for s in sims) == 1
                break  # closing the generator closes the response: the client goes away here
    assert wait_idle(gateway, sims) == (0, 0)


def test_no_backend_serving_is_503_with_retry_after(sims: list[Proc]) -> None:
    dead_port_url = "http://127.0.0.1:9"  # discard port: nothing listens
    config = {"backends": [{"url": dead_port_url, "models": [MODEL]}], "health": {"interval": 0.2}}
    with spawn_gateway(config) as gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.InternalServerError) as info:
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
        assert info.value.status_code == 503
        assert info.value.response.headers["retry-after"]
        assert int(info.value.response.headers["retry-after-ms"]) > 0
        health = httpx.get(f"{gw.url}/health")
        assert health.status_code == 503
    # without pinned models the model is unknown until the backend answers: 503, not 404
    with spawn_gateway({"backends": [dead_port_url]}) as gw:
        resp = httpx.post(f"{gw.url}/v1/chat/completions", json={"model": MODEL, "messages": []})
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "no_backend"
        assert float(resp.headers["retry-after-ms"]) > 0


def test_dead_backend_is_retried_elsewhere_then_ejected(
    gateway: Proc, sims: list[Proc], client: openai.OpenAI
) -> None:
    httpx.post(f"{sims[0].url}/sim/faults", json={"die": True})
    try:
        served = {
            client.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=[{"role": "user", "content": f"r{i}"}],
                max_tokens=2,
            ).headers["x-gateway-backend"]
            for i in range(10)
        }
        assert served == {"sim-1"}
        # Out of rotation once its failures (a retried request, then health checks every 0.2 s)
        # reach the threshold of 2: at once if two requests went to it, else within a check or two.
        deadline = time.monotonic() + 3
        while next(b for b in state(gateway)["backends"] if b["name"] == "sim-0")["in_rotation"]:
            assert time.monotonic() < deadline, "sim-0 was not ejected"
            time.sleep(0.05)
    finally:
        httpx.post(f"{sims[0].url}/sim/faults", json={"reset": True})
    deadline = time.monotonic() + 10
    while not all(b["in_rotation"] for b in state(gateway)["backends"]):
        assert time.monotonic() < deadline, "sim-0 did not come back into rotation"
        time.sleep(0.1)
    assert wait_idle(gateway, sims) == (0, 0)


def test_backend_dying_mid_stream_ends_the_stream_with_an_error_event(
    gateway: Proc, sims: list[Proc]
) -> None:
    events: list[str] = []
    try:
        with httpx.stream(
            "POST",
            f"{gateway.url}/v1/completions",
            timeout=30,
            json={
                "model": MODEL,
                "prompt": "long",
                "stream": True,
                "max_tokens": 600,
                "ignore_eos": True,
            },
        ) as resp:
            backend = next(s for i, s in enumerate(sims) if resp.headers["x-gateway-backend"] == f"sim-{i}")
            for line in resp.iter_lines():
                if line:
                    events.append(line)
                if len(events) == 3:
                    httpx.post(f"{backend.url}/sim/faults", json={"die": True})
        assert "[DONE]" not in events[-1]
        assert '"error"' in events[-1]  # said in-band: the 200 status was already sent
    finally:
        for sim in sims:
            httpx.post(f"{sim.url}/sim/faults", json={"reset": True})
    assert wait_idle(gateway, sims) == (0, 0)


def test_every_answer_the_gateway_makes_itself_carries_a_request_id(gateway: Proc) -> None:
    url = gateway.url
    answers = {
        "bad json": httpx.post(f"{url}/v1/chat/completions", content=b"{", headers={"content-type": "x"}),
        "no route": httpx.get(f"{url}/nope"),
        "method": httpx.get(f"{url}/v1/chat/completions"),
        "model": httpx.post(f"{url}/v1/completions", json={"model": "nope", "prompt": "x"}),
        "too large": httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": "x" * 100_000}),
    }
    assert [a.status_code for a in answers.values()] == [400, 404, 405, 404, 413]
    ids = [a.headers["x-request-id"] for a in answers.values()]
    assert all(len(i) == 24 for i in ids) and len(set(ids)) == len(ids)
    mine = httpx.post(
        f"{url}/v1/completions", json={"model": "nope", "prompt": "x"}, headers={"x-request-id": "trace-7"}
    )
    assert mine.status_code == 404 and mine.headers["x-request-id"] == "trace-7"
    routed = httpx.get(f"{url}/nope", headers={"x-request-id": "trace-8"})
    assert routed.headers["x-request-id"] == "trace-8"


def test_an_unknown_model_is_told_the_models_served(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    body = info.value.body
    assert isinstance(body, dict)
    assert body["message"] == f"The model `gpt-4o` does not exist. Served models: {MODEL}."
    assert info.value.request_id


def test_the_api_without_v1_gets_a_404_that_says_to_use_v1(gateway: Proc) -> None:
    resp = httpx.post(f"{gateway.url}/chat/completions", json={"model": MODEL, "messages": []})
    assert resp.status_code == 404
    assert resp.json()["error"]["message"] == (
        "no route for /chat/completions; the OpenAI API is under /v1: POST /v1/chat/completions "
        "(an OpenAI client's base_url ends in /v1)"
    )
    assert httpx.get(f"{gateway.url}/unknown").json()["error"]["message"] == "no route for /unknown"


def test_a_backend_down_at_start_is_a_warning_and_its_503_carries_a_request_id() -> None:
    config = {"backends": [{"url": "http://127.0.0.1:9", "name": "gone", "models": [MODEL]}]}
    with spawn_gateway(config) as gw:  # logs at --log-level warning: INFO lines do not show
        resp = httpx.post(f"{gw.url}/v1/completions", json={"model": MODEL, "prompt": "x"})
        assert resp.status_code == 503 and resp.headers["x-request-id"]
        log = gw.stderr()
    assert "WARNING gateway: backend gone DOWN: health check failed" in log
