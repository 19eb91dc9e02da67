from __future__ import annotations

import json

import pytest

from loadtests.streaming import StreamReader, completion_timings


def chunk(content: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    event: dict[str, object] = {"choices": [] if content is None else [{"delta": {"content": content}}]}
    if usage is not None:
        event["usage"] = usage
    return f"data: {json.dumps(event)}\n".encode()


def test_ttft_tpot_and_rate_from_a_chat_stream_with_usage() -> None:
    reader = StreamReader(started=10.0)
    reader.feed(b": keep-alive\n", 10.1)
    reader.feed(json.dumps({"choices": [{"delta": {"role": "assistant"}}]}).join(["data: ", "\n"]), 10.2)
    reader.feed(chunk("Hel"), 10.5)  # first content: TTFT 0.5 s
    reader.feed(b"\n", 10.5)
    reader.feed(chunk("lo"), 10.6)
    reader.feed(chunk(" there"), 10.7)
    reader.feed(chunk(usage={"prompt_tokens": 7, "completion_tokens": 5}), 10.8)
    reader.feed(b"data: [DONE]\n", 10.8)
    t = reader.timings(ended=11.0)
    assert reader.done and reader.error is None
    assert t.ttft == pytest.approx(0.5)
    assert t.e2e == pytest.approx(1.0)
    # usage wins over the chunk count: 5 tokens, 4 gaps over the 0.5 s after the first
    assert t.output_tokens == 5 and t.tokens_from_usage and t.prompt_tokens == 7
    assert t.tpot == pytest.approx(0.5 / 4)
    assert t.tokens_per_s == pytest.approx(5.0)


def test_without_usage_the_content_chunks_are_counted() -> None:
    reader = StreamReader(started=0.0)
    for i, text in enumerate(["a", "b", "c"]):
        reader.feed(f"data: {json.dumps({'choices': [{'text': text}]})}\n", 1.0 + i)
    reader.feed("data: [DONE]", 3.0)
    t = reader.timings(ended=3.0)
    assert t.output_tokens == 3 and not t.tokens_from_usage
    assert t.ttft == pytest.approx(1.0)
    assert t.tpot == pytest.approx(1.0)


def test_an_error_event_inside_a_200_stream_is_reported() -> None:
    reader = StreamReader(started=0.0)
    reader.feed(chunk("x"), 0.1)
    reader.feed(b'data: {"error": {"message": "engine died", "code": 500}}\n', 0.2)
    assert reader.error == "engine died"
    assert not reader.done


def test_one_token_has_a_ttft_but_no_tpot() -> None:
    reader = StreamReader(started=0.0)
    reader.feed(chunk("x"), 0.3)
    t = reader.timings(ended=0.4)
    assert t.ttft == pytest.approx(0.3) and t.tpot is None


def test_non_streaming_answer_takes_tokens_from_usage() -> None:
    body = {"choices": [{"text": "one two"}], "usage": {"prompt_tokens": 3, "completion_tokens": 9}}
    t = completion_timings(json.dumps(body).encode(), 1.0, 4.0)
    assert t.output_tokens == 9 and t.ttft is None and t.tpot is None
    assert t.tokens_per_s == pytest.approx(3.0)


def test_non_streaming_chat_without_usage_counts_words() -> None:
    body = {"choices": [{"message": {"role": "assistant", "content": "one two three"}}]}
    t = completion_timings(json.dumps(body).encode(), 0.0, 1.0)
    assert t.output_tokens == 3 and not t.tokens_from_usage
