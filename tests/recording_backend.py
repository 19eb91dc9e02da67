"""A minimal OpenAI-compatible backend on loopback that records the headers of every POST it gets."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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


@contextlib.contextmanager
def recording_backend() -> Iterator[ThreadingHTTPServer]:
    """The server, running; `server.seen` lists the lower-cased headers of each POST, `.url` its base."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.seen = []  # type: ignore[attr-defined]
    server.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
