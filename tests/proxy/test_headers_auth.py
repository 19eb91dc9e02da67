"""What crosses the gateway: headers to the backend, API keys, tenants. A recording backend on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import openai
import pytest

from tests.procs import Proc, spawn_gateway


@pytest.fixture(scope="module")
def gateway(recorder: ThreadingHTTPServer) -> Iterator[Proc]:
    url = f"http://127.0.0.1:{recorder.server_address[1]}"
    config = {
        "backends": [{"url": url, "name": "rec", "api_key": "backend-secret"}],
        "tenants": [{"name": "alpha", "api_keys": ["key-a"]}, {"name": "beta", "api_keys": ["key-b"]}],
    }
    with spawn_gateway(config) as gw:
        yield gw


def chat(gateway: Proc, key: str, **kw: object) -> openai.types.chat.ChatCompletion:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    return client.chat.completions.create(model="rec", messages=[{"role": "user", "content": "x"}], **kw)  # type: ignore[call-overload,no-any-return]


def test_client_key_is_never_forwarded_backend_key_is(gateway: Proc, recorder: ThreadingHTTPServer) -> None:
    chat(gateway, "key-a", extra_headers={"x-request-id": "rid-1", "x-custom": "kept"})
    headers = recorder.seen[-1]  # type: ignore[attr-defined]
    assert headers["authorization"] == "Bearer backend-secret"
    assert "key-a" not in json.dumps(headers)
    assert headers["x-request-id"] == "rid-1"
    assert headers["x-custom"] == "kept"
    assert "connection" not in headers or headers["connection"].lower() != "upgrade"


def test_missing_or_wrong_key_is_401(gateway: Proc) -> None:
    with pytest.raises(openai.AuthenticationError) as info:
        chat(gateway, "wrong")
    assert info.value.code == "invalid_api_key"
    import httpx

    missing = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "rec", "messages": []})
    assert missing.status_code == 401
    assert missing.json()["error"]["type"] == "authentication_error"


def test_every_configured_key_is_accepted(gateway: Proc) -> None:
    for key in ("key-a", "key-b"):
        assert chat(gateway, key).choices[0].message.content == "ok"
