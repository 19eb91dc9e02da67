"""The HTTP face over loopback with real clients: httpx and the OpenAI SDK."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
import openai
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.sim.faults import Faults
from gateway.sim.metrics import TOKEN_LATENCY_BUCKETS, TTFT_BUCKETS
from gateway.sim.profiles import get_profile
from gateway.sim.server import SimConfig, SimServer


@pytest.fixture
async def tiny() -> AsyncIterator[SimServer]:
    server = SimServer(SimConfig(profile=get_profile("tiny-cpu", step_base=0.0005)))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def client(tiny: SimServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=tiny.url, timeout=10) as c:
        yield c


@pytest.fixture
async def sdk(tiny: SimServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=tiny.url + "/v1", api_key="x", max_retries=0) as c:
        yield c


async def eventually(check: Callable[[], bool], within: float = 3.0) -> None:
    """Wait for a state another task reaches; fails loudly instead of sleeping blindly."""
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def sse_events(raw: bytes) -> list[bytes]:
    assert raw.endswith(b"\n\n")
    events = raw.split(b"\n\n")[:-1]
    assert all(e.startswith(b"data: ") for e in events)
    return [e[len(b"data: ") :] for e in events]


CHAT = {"model": "tiny-llama", "messages": [{"role": "user", "content": "hello there"}]}


async def test_chat_stream_has_vllm_chunk_format(client: httpx.AsyncClient) -> None:
    body = {**CHAT, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}}
    resp = await client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = sse_events(resp.content)
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "tiny-llama" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = chunks[1:-1]
    assert [c["choices"][0]["finish_reason"] for c in content][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in content[:-1])
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    assert text
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    prompt = len(b"hello there") + 4 + 3  # bytes (1 token each) + message and template overhead
    assert usage_chunk["usage"] == {
        "prompt_tokens": prompt,
        "total_tokens": prompt + 4,
        "completion_tokens": 4,
    }


async def test_usage_chunk_only_when_asked(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 3, "stream": True})
    chunks = [orjson.loads(e) for e in sse_events(resp.content)[:-1]]
    assert all(c["choices"] and "usage" not in c for c in chunks)
    assert chunks[0]["object"] == "text_completion"
    assert "".join(c["choices"][0]["text"] for c in chunks)


async def test_openai_sdk_chat_completion_and_stream(sdk: openai.AsyncOpenAI) -> None:
    done = await sdk.chat.completions.create(
        model="tiny-llama",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=6,
        extra_body={"ignore_eos": True},
    )
    assert done.choices[0].finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 6
    assert done.usage.total_tokens == done.usage.prompt_tokens + 6
    stream = await sdk.chat.completions.create(
        model="tiny-llama",
        messages=[{"role": "user", "content": "hi"}],
        max_completion_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces = []
    usage = None
    async for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(pieces)
    assert usage is not None and usage.completion_tokens == 5


async def test_openai_sdk_completions_models_embeddings(sdk: openai.AsyncOpenAI) -> None:
    done = await sdk.completions.create(model="tiny-llama", prompt="x" * 660, max_tokens=600)
    # 660 prompt tokens (one per byte) leave 364 under max_model_len 1024.
    assert done.usage is not None and done.usage.prompt_tokens == 660
    assert done.usage.completion_tokens <= 364
    done = await sdk.completions.create(
        model="tiny-llama", prompt="y" * 660, max_tokens=600, extra_body={"ignore_eos": True}
    )
    assert done.usage is not None and done.usage.completion_tokens == 364
    models = await sdk.models.list()
    assert [m.id for m in models.data] == ["tiny-llama"]
    one = await sdk.embeddings.create(model="tiny-llama", input=["alpha", "beta"])
    two = await sdk.embeddings.create(model="tiny-llama", input="alpha")
    assert one.data[0].embedding == two.data[0].embedding
    assert one.data[0].embedding != one.data[1].embedding
    assert len(one.data[0].embedding) == 64


async def test_errors_in_vllm_shape(client: httpx.AsyncClient, sdk: openai.AsyncOpenAI) -> None:
    too_long = {"model": "tiny-llama", "prompt": "z" * 1024, "max_tokens": 1}
    resp = await client.post("/v1/completions", json=too_long)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == 400 and error["type"] == "BadRequestError"
    assert "maximum context length is 1024 tokens" in error["message"]
    assert "1024 input tokens" in error["message"]
    with pytest.raises(openai.NotFoundError) as missing:
        await sdk.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert "`nope` does not exist" in str(missing.value)
    resp = await client.post("/v1/chat/completions", content=b"{not json")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == 400
    resp = await client.post("/v1/chat/completions", json={"messages": "hi"})
    assert resp.status_code == 400
    resp = await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 0})
    assert resp.status_code == 400


async def test_health_version_and_unknown_route(client: httpx.AsyncClient) -> None:
    health = await client.get("/health")
    assert health.status_code == 200 and health.content == b""
    assert "version" in (await client.get("/version")).json()
    assert (await client.get("/nope")).status_code == 404
    assert (await client.get("/v1/chat/completions")).status_code == 405


async def test_metrics_parse_with_vllm_names_labels_and_buckets(
    client: httpx.AsyncClient,
) -> None:
    for _ in range(2):
        await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 3})
    text = (await client.get("/metrics")).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions",
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:cache_config_info",
    ):
        assert name in families, name
    for sample in families["vllm:num_requests_running"].samples:
        assert sample.labels == {"model_name": "tiny-llama", "engine": "0"}
    gen = [s for s in families["vllm:generation_tokens"].samples if s.name.endswith("_total")]
    assert gen[0].value == 6
    ttft = families["vllm:time_to_first_token_seconds"].samples
    bounds = [float(s.labels["le"]) for s in ttft if s.name.endswith("_bucket")]
    assert bounds == [*TTFT_BUCKETS, float("inf")]
    assert next(s.value for s in ttft if s.name.endswith("_count")) == 2
    itl = families["vllm:inter_token_latency_seconds"].samples
    bounds = [float(s.labels["le"]) for s in itl if s.name.endswith("_bucket")]
    assert bounds == [*TOKEN_LATENCY_BUCKETS, float("inf")]
    info = families["vllm:cache_config_info"].samples[0]
    assert info.value == 1
    assert info.labels["block_size"] == "128" and info.labels["num_gpu_blocks"] == "64"
    assert info.labels["engine"] == "0"


async def test_prefix_cache_counters_count_queried_and_cached_tokens(client: httpx.AsyncClient) -> None:
    document = "d" * 600  # tiny-cpu: one token per byte, blocks of 128
    for question in ("who?", "why so?"):
        body = {"model": "tiny-llama", "prompt": document + question, "max_tokens": 1}
        assert (await client.post("/v1/completions", json=body)).status_code == 200
    text = (await client.get("/metrics")).text
    totals = {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("vllm:prefix_cache_")
    }
    # The second prompt reuses the 4 full blocks inside the document: 512 tokens.
    assert totals["vllm:prefix_cache_queries_total"] == 604 + 607
    assert totals["vllm:prefix_cache_hits_total"] == 512


async def test_client_disconnect_aborts_and_frees_blocks(tiny: SimServer) -> None:
    engine = tiny.engine
    body = {**CHAT, "max_tokens": 800, "ignore_eos": True, "stream": True}
    async with (
        httpx.AsyncClient(base_url=tiny.url, timeout=10) as c,
        c.stream("POST", "/v1/chat/completions", json=body) as resp,
    ):
        async for _ in resp.aiter_bytes():
            break
        assert engine.num_running == 1 and engine.pool.num_free < 64
    await eventually(lambda: engine.num_running == 0)
    assert engine.pool.num_free == 64 and engine.kv_usage == 0.0


async def test_error_rate_fault_answers_with_the_status(tiny: SimServer) -> None:
    async with httpx.AsyncClient(base_url=tiny.url, timeout=5) as c:
        set_ = await c.post("/sim/faults", json={"error_rate": 1.0, "error_status": 503})
        assert set_.json()["error_rate"] == 1.0
        resp = await c.post("/v1/chat/completions", json={**CHAT, "max_tokens": 2})
        assert resp.status_code == 503 and resp.json()["error"]["code"] == 503
        assert (await c.get("/health")).status_code == 200
        reset = await c.post("/sim/faults", json={"reset": True})
        assert reset.json() == Faults().as_dict()
        resp = await c.post("/v1/chat/completions", json={**CHAT, "max_tokens": 2})
        assert resp.status_code == 200


async def test_die_drops_connections_and_admin_revives(tiny: SimServer) -> None:
    async with httpx.AsyncClient(base_url=tiny.url, timeout=5) as c:
        body = {**CHAT, "max_tokens": 800, "ignore_eos": True, "stream": True}
        async with c.stream("POST", "/v1/chat/completions", json=body) as resp:
            it = resp.aiter_bytes()
            await it.__anext__()
            await c.post("/sim/faults", json={"die": True})
            with pytest.raises(httpx.RemoteProtocolError):
                async for _ in it:
                    pass
        assert tiny.engine.num_running == 0 and tiny.engine.pool.num_free == 64
        for path in ("/health", "/metrics"):
            with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
                await c.get(path)
        assert (await c.get("/sim/faults")).json()["die"] is True
        await c.post("/sim/faults", json={"die": False})
        assert (await c.get("/health")).status_code == 200


async def test_hang_accepts_and_never_answers_until_reset(tiny: SimServer) -> None:
    async with httpx.AsyncClient(base_url=tiny.url, timeout=5) as c:
        await c.post("/sim/faults", json={"hang": True})
        with pytest.raises(httpx.ReadTimeout):
            await c.get("/health", timeout=0.3)
        pending = asyncio.create_task(c.post("/v1/completions", json={"prompt": "a"}))
        await asyncio.sleep(0)  # let it be sent
        await c.post("/sim/faults", json={"reset": True})
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            await pending
        assert (await c.get("/health")).status_code == 200


async def test_speed_fault_scales_the_engine_pace(tiny: SimServer) -> None:
    async with httpx.AsyncClient(base_url=tiny.url, timeout=5) as c:
        resp = await c.post("/sim/faults", json={"speed": 0.5})
        assert resp.json()["speed"] == 0.5
        assert tiny.driver is not None and tiny.driver.faults.speed == 0.5
        bad = await c.post("/sim/faults", json={"speed": 0})
        assert bad.status_code == 400
        bad = await c.post("/sim/faults", json={"explode": True})
        assert bad.status_code == 400
