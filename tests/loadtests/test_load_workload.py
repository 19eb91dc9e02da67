from __future__ import annotations

import random
from argparse import Namespace
from collections import Counter
from typing import Any

import pytest

from loadtests.workload import next_request, parse_mix, read_profile


def options(**kw: Any) -> Namespace:
    base: dict[str, Any] = {
        "model": "", "api_key": "", "mix": "chat-stream=3,completion=1",
        "prompt_tokens": "fixed:12", "output_tokens": "uniform:5,9", "no_ignore_eos": False,
        "think_time": 0, "ignore_retry_after": False, "seed": 0,
    }  # fmt: skip
    base.update(kw)
    return Namespace(**base)


def test_mix_follows_its_weights() -> None:
    profile = read_profile(options())
    rng = random.Random(5)
    kinds = Counter(
        (path, stream) for path, stream, _ in (next_request(profile, "m", rng) for _ in range(4000))
    )
    assert set(kinds) == {("/v1/chat/completions", True), ("/v1/completions", False)}
    assert kinds[("/v1/chat/completions", True)] / 4000 == pytest.approx(0.75, abs=0.03)


def test_streaming_chat_body_asks_for_usage() -> None:
    profile = read_profile(options(mix="chat-stream"))
    path, stream, body = next_request(profile, "llama", random.Random(1))
    assert (path, stream) == ("/v1/chat/completions", True)
    assert body["model"] == "llama" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and 5 <= body["max_tokens"] <= 9
    (message,) = body["messages"]
    assert message["role"] == "user" and len(message["content"].split()) == 12


def test_plain_completion_body_has_a_prompt_and_may_stop_early() -> None:
    profile = read_profile(options(mix="completion", no_ignore_eos="true"))  # as the web UI sends it
    path, stream, body = next_request(profile, "m", random.Random(2))
    assert (path, stream) == ("/v1/completions", False)
    assert "stream_options" not in body and "ignore_eos" not in body and "messages" not in body
    assert len(body["prompt"].split()) == 12


def test_same_seed_same_requests() -> None:
    profile = read_profile(options(seed=7))
    first = [next_request(profile, "m", random.Random(7)) for _ in range(3)]
    again = [next_request(profile, "m", random.Random(7)) for _ in range(3)]
    assert first == again


@pytest.mark.parametrize(
    ("spec", "reason"),
    [("chat-stream=x", "must be a number"), ("embed=1", "unknown kind"), ("chat=0", "positive weight")],
)
def test_bad_mix_is_refused(spec: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_mix(spec)
