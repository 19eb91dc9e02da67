"""Quotas and usage as a client meets them: the real OpenAI SDK against a gateway and the simulator."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.procs import Proc, spawn_gateway, spawn_sim
from tests.tenancy.helpers import metric

ADMIN_KEY = "admin-secret"


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    with spawn_sim("--profile", "instant", "--model", "m") as proc:
        yield proc


def gateway_config(sim: Proc, data_dir: Path | None = None, **quota: int) -> dict[str, object]:
    config: dict[str, object] = {
        "backends": [{"url": sim.url, "name": "sim"}],
        "tenants": [
            {"name": "limited", "api_keys": ["key-l"], **quota},
            {"name": "free", "api_keys": ["key-f"]},
        ],
        "admin": {"api_key": ADMIN_KEY},
    }
    if data_dir is not None:
        config["usage"] = {"data_dir": str(data_dir), "flush_interval": 0.2}
    return config


def client(gw: Proc, key: str, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=retries)


def ask(
    c: openai.OpenAI, content: str = "hello there", max_tokens: int = 5
) -> openai.types.chat.ChatCompletion:
    return c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": content}], max_tokens=max_tokens
    )


def test_the_sdk_sees_the_rate_limit_headers_and_a_429_over_quota(sim: Proc) -> None:
    with spawn_gateway(
        gateway_config(sim, requests_per_minute=3, tokens_per_minute=100_000), ready="/health"
    ) as gw:
        c = client(gw, "key-l")
        raw = c.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        assert raw.headers["x-ratelimit-limit-requests"] == "3"
        assert raw.headers["x-ratelimit-remaining-requests"] == "2"
        assert raw.headers["x-ratelimit-limit-tokens"] == "100000"
        assert int(raw.headers["x-ratelimit-remaining-tokens"]) < 100_000
        assert raw.headers["x-ratelimit-reset-requests"].endswith("s")
        ask(c)
        ask(c)
        with pytest.raises(openai.RateLimitError) as refused:
            ask(c)
        err = refused.value
        assert err.code == "rate_limit_exceeded"
        assert err.response.headers["x-ratelimit-remaining-requests"] == "0"
        assert 1 <= int(err.response.headers["retry-after"]) <= 20  # 3 per minute: one each 20 s
        assert err.response.headers["x-should-retry"] == "true"
        # Another tenant is not limited by this one's quota.
        ask(client(gw, "key-f"))
        assert metric(gw.url, "gateway_rejected_requests_total", reason="rate_limit_exceeded") == 1


def test_the_sdk_waits_as_retry_after_says_and_then_gets_through(sim: Proc) -> None:
    with spawn_gateway(gateway_config(sim, requests_per_minute=20), ready="/health") as gw:
        c = client(gw, "key-l")
        for _ in range(40):  # empty the bucket: 20 at once, then one every 3 s
            try:
                ask(c)
            except openai.RateLimitError:
                break
        # What the SDK's HTTP client sends and is told, in order.
        seen: list[tuple[str, float, httpx.Response | None]] = []
        hooks = {
            "request": [lambda request: seen.append(("sent", time.monotonic(), None))],
            "response": [lambda response: seen.append(("answered", time.monotonic(), response))],
        }
        with httpx.Client(event_hooks=hooks) as http:
            sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="key-l", max_retries=2, http_client=http)
            assert ask(sdk).choices[0].message.content
        answers = [r for kind, _, r in seen if kind == "answered" and r is not None]
        assert [r.status_code for r in answers] == [429, 200]  # one wait was enough
        told = float(answers[0].headers["retry-after-ms"]) / 1000
        answered_at = seen[1][1]
        resent_at = seen[2][1]
        assert seen[2][0] == "sent" and resent_at - answered_at >= told  # it waited what it was told


def test_concurrent_requests_over_the_quota_are_refused() -> None:
    # A GPU-speed profile: a 300-token answer streams for seconds.
    with (
        spawn_sim("--model", "m") as slow,
        spawn_gateway(gateway_config(slow, max_concurrent=1), ready="/health") as gw,
    ):
        c = client(gw, "key-l")
        with c.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "x"}],
            max_tokens=300,
            stream=True,
            extra_body={"ignore_eos": True},
        ) as stream:
            next(iter(stream))  # the first request is under way
            with pytest.raises(openai.RateLimitError) as refused:
                ask(c)
            assert "concurrent" in refused.value.message
        # The first one ended (its client went away): its place comes back once the gateway has
        # seen the disconnect; told to retry after 1 s, the SDK gets in.
        ask(client(gw, "key-l", retries=3))


def usage_of(gw: Proc) -> dict[tuple[str, str], dict[str, int]]:
    r = httpx.get(
        f"{gw.url}/admin/usage", params={"start": 0}, headers={"authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert r.status_code == 200, r.text
    return {(row["tenant"], row["model"]): row for row in r.json()["data"]}


def send_mixed(gw: Proc, n: int) -> tuple[int, int]:
    """n plain and n streaming requests of tenant `free`; the prompt and output tokens the backend
    reported in their `usage`."""
    c = client(gw, "key-f")
    prompt = output = 0
    for i in range(n):
        answer = ask(c, "tell me about tokens " * (i + 1), max_tokens=7 + i)
        assert answer.usage is not None
        prompt += answer.usage.prompt_tokens
        output += answer.usage.completion_tokens
        stream = c.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "stream " * (3 * i + 1)}],
            max_tokens=11 + i,
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            if chunk.usage is not None:
                prompt += chunk.usage.prompt_tokens
                output += chunk.usage.completion_tokens
    return prompt, output


def test_counters_and_admin_usage_agree_with_the_backend_across_a_restart(sim: Proc, tmp_path: Path) -> None:
    config = gateway_config(sim, tmp_path)
    with spawn_gateway(config, ready="/health") as gw:
        first = send_mixed(gw, 4)
        assert metric(gw.url, "gateway_tenant_tokens_total", tenant="free", kind="prompt") == first[0]
        assert metric(gw.url, "gateway_tenant_tokens_total", tenant="free", kind="output") == first[1]
        assert metric(gw.url, "gateway_tenant_requests_total", tenant="free", model="m") == 8
        row = usage_of(gw)[("free", "m")]
        assert (row["prompt_tokens"], row["output_tokens"], row["requests"]) == (*first, 8)
        unauthorised = httpx.get(f"{gw.url}/admin/usage")
        assert unauthorised.status_code == 401
    with spawn_gateway(config, ready="/health") as gw:
        second = send_mixed(gw, 3)
        # Counters start again with the process; the store kept what came before.
        assert metric(gw.url, "gateway_tenant_tokens_total", tenant="free", kind="output") == second[1]
        row = usage_of(gw)[("free", "m")]
        assert row["prompt_tokens"] == first[0] + second[0]
        assert row["output_tokens"] == first[1] + second[1]
        assert row["requests"] == 8 + 6
        bad = httpx.get(
            f"{gw.url}/admin/usage",
            params={"start": "yesterday"},
            headers={"authorization": f"Bearer {ADMIN_KEY}"},
        )
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "start"
