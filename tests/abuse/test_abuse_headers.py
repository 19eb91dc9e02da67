"""What a client sends that must not reach the backend, or come back to it unbounded.

A recording backend on loopback sees exactly what the gateway forwards: credentials meant for
somebody else (`x-api-key`, `api-key`, `Cookie`, `OpenAI-Organization`) used to reach it, and a
request id of any length was forwarded and echoed back.
"""

from __future__ import annotations

from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import httpx
import openai
import pytest

from gateway.proxy.request import MAX_REQUEST_ID
from tests.procs import Proc, spawn_gateway


@pytest.fixture(scope="module")
def gateway(recorder: ThreadingHTTPServer) -> Iterator[Proc]:
    config = {
        "backends": [{"url": recorder.url, "name": "rec", "api_key": "backend-secret"}],  # type: ignore[attr-defined]
        "headers": {"sensitive": ["X-Internal-Token"], "pass": ["openai-project"]},
    }
    with spawn_gateway(config) as gw:
        yield gw


def test_client_credentials_are_dropped_unless_configured_to_pass(
    gateway: Proc, recorder: ThreadingHTTPServer
) -> None:
    client = openai.OpenAI(
        base_url=f"{gateway.url}/v1",
        api_key="client-key",
        organization="org-client",
        project="proj-client",
        max_retries=0,
    )
    client.chat.completions.create(
        model="rec",
        messages=[{"role": "user", "content": "x"}],
        extra_headers={
            "x-api-key": "anthropic-style-key",
            "api-key": "azure-style-key",
            "Cookie": "session=secret",
            "X-Internal-Token": "internal",
            "x-custom": "kept",
        },
    )
    seen = recorder.seen[-1]  # type: ignore[attr-defined]
    assert seen["authorization"] == "Bearer backend-secret"
    for name in ("x-api-key", "api-key", "cookie", "openai-organization", "x-internal-token"):
        assert name not in seen, name
    assert seen["openai-project"] == "proj-client"  # configured to pass
    assert seen["x-custom"] == "kept"
    secrets = ("client-key", "anthropic-style-key", "azure-style-key", "session=secret", "org-client")
    assert not any(secret in value for value in seen.values() for secret in secrets)


@pytest.mark.parametrize("sent", ["x" * (MAX_REQUEST_ID + 1), "y" * 16_000, "has space", "\u00e9t\u00e9"])
def test_an_unfit_request_id_is_replaced_not_echoed(
    gateway: Proc, recorder: ThreadingHTTPServer, sent: str
) -> None:
    resp = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "rec", "messages": []},
        headers={"x-request-id": sent.encode("latin-1")},  # type: ignore[dict-item]
        timeout=10,
    )
    assert resp.status_code == 200
    echoed = resp.headers["x-request-id"]
    assert echoed != sent and 0 < len(echoed) <= MAX_REQUEST_ID
    assert recorder.seen[-1]["x-request-id"] == echoed  # type: ignore[attr-defined]


def test_a_fit_request_id_is_kept(gateway: Proc, recorder: ThreadingHTTPServer) -> None:
    sent = "req-" + "z" * (MAX_REQUEST_ID - 4)
    resp = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "rec", "messages": []},
        headers={"x-request-id": sent},
        timeout=10,
    )
    assert resp.headers["x-request-id"] == sent
    assert recorder.seen[-1]["x-request-id"] == sent  # type: ignore[attr-defined]


def test_hop_by_hop_and_gateway_control_headers_stay_here_and_bytes_pass_unchanged(
    gateway: Proc, recorder: ThreadingHTTPServer
) -> None:
    sent = {
        "Connection": "keep-alive, X-Hop-Secret",
        "X-Hop-Secret": "for the gateway only",
        "Proxy-Connection": "keep-alive",
        "Keep-Alive": "timeout=5",
        "TE": "trailers",
        "x-priority": "5",
        "x-queue-timeout": "30",
        "x-session-id": "s-1",
        "X-Forwarded-For": "203.0.113.9",
    }
    encoded = {k: v.encode() for k, v in sent.items()}
    encoded["x-utf8"] = "caf\u00e9 \u2615".encode()
    encoded["x-latin1"] = b"\xe9t\xe9"  # not UTF-8: cannot reach the backend as sent
    resp = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "rec", "messages": []},
        headers=encoded,  # type: ignore[arg-type]
        timeout=10,
    )
    assert resp.status_code == 200
    seen = recorder.seen[-1]  # type: ignore[attr-defined]
    for name in ("x-hop-secret", "proxy-connection", "keep-alive", "te", "x-priority", "x-queue-timeout"):
        assert name not in seen, name
    assert "x-session-id" not in seen and "x-latin1" not in seen
    assert seen.get("connection", "").lower() != "keep-alive, x-hop-secret"
    assert seen["x-forwarded-for"] == "203.0.113.9, 127.0.0.1"  # appended to, not replaced
    # http.server reads header bytes as Latin-1: the same bytes the client sent, not re-encoded.
    assert seen["x-utf8"].encode("latin-1") == encoded["x-utf8"]
