"""What crosses the gateway: headers to the backend, API keys, tenants. A recording backend on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

from tests.procs import Proc, spawn_gateway


class Recorder(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible backend that remembers the headers of each POST."""

    seen: list[dict[str, str]]

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._reply(200, b'{"object":"list","data":[{"id":"rec","object":"model"}]}')
        elif self.path in ("/health", "/metrics"):
            self._reply(200, b"", "text/plain")
        else:
            self._reply(404, b"{}")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.server.seen.append({k.lower(): v for k, v in self.headers.items()})  # type: ignore[attr-defined]
        self._reply(
            200,
            json.dumps(
                {
                    "id": "c",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "rec",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "ok"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            ).encode(),
        )

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def recorder() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


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
