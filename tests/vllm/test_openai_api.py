"""The OpenAI SDK, pointed at the gateway, gets what the real vLLM engine behind it serves."""

from __future__ import annotations

import openai
import pytest
from openai import OpenAI
from real_engine import Gateway

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


@pytest.fixture
def client(gateway: Gateway) -> OpenAI:
    return OpenAI(base_url=gateway.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_models_lists_the_engines_model(client: OpenAI, gateway: Gateway) -> None:
    ids = [model.id for model in client.models.list()]
    assert gateway.engine.model in ids


def test_chat_completion(client: OpenAI, gateway: Gateway) -> None:
    reply = client.chat.completions.create(
        model=gateway.engine.model,
        messages=[{"role": "user", "content": "Say something."}],
        max_tokens=12,
        extra_body={"ignore_eos": True},
    )
    choice = reply.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason == "length"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 12
    # The chat template adds role markers around the message, so the engine counts more
    # prompt tokens than the message's own bytes would give.
    assert reply.usage.prompt_tokens > len("Say something.")
    assert reply.model == gateway.engine.model


def test_chat_stream_ends_with_usage(client: OpenAI, gateway: Gateway) -> None:
    stream = client.chat.completions.create(
        model=gateway.engine.model,
        messages=[{"role": "user", "content": "Stream a few tokens."}],
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    token_chunks = 0
    finish_reasons = []
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content is not None:
                token_chunks += 1
            if choice.finish_reason is not None:
                finish_reasons.append(choice.finish_reason)
    assert finish_reasons == ["length"]
    assert usage is not None and usage.completion_tokens == 20
    # vLLM sends one chunk per token (merging some when its front end lags), plus the
    # assistant-role chunk.
    assert 2 <= token_chunks <= 21


def test_completion(client: OpenAI, gateway: Gateway) -> None:
    reply = client.completions.create(
        model=gateway.engine.model,
        prompt="0123456789",
        max_tokens=7,
        extra_body={"ignore_eos": True},
    )
    assert reply.usage is not None
    # No digit merges in the tiny tokenizer: ten digits are ten tokens.
    assert reply.usage.prompt_tokens == 10
    assert reply.usage.completion_tokens == 7
    assert reply.choices[0].finish_reason == "length"
    assert isinstance(reply.choices[0].text, str)


def test_completion_stream(client: OpenAI, gateway: Gateway) -> None:
    stream = client.completions.create(
        model=gateway.engine.model,
        prompt="9876543210",
        max_tokens=15,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and usage[0].completion_tokens == 15
    finished = [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason]
    assert finished == ["length"]


def test_engine_rejection_reaches_the_client_as_the_sdks_error(client: OpenAI, gateway: Gateway) -> None:
    # The engine's max_model_len is 1024: a longer prompt is the engine's 400, which the
    # gateway must pass through rather than retry or turn into a 5xx.
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=gateway.engine.model, prompt="7" * 1500, max_tokens=4)
    assert caught.value.status_code == 400
