"""One batch line through the gateway's own OpenAI handler, in-process: the real request path.

The line is handed to the same ASGI handler that serves HTTP clients, with a synthetic scope,
receive and send: admission (in the queue's background class, by the scope key `BACKGROUND_TENANT`,
which only in-process callers can set), backend choice, retries, forwarding, slot accounting and
telemetry are the ones interactive requests get, not a second copy of them.

`receive` hands over the body and then waits on `stop`: setting it tells the handler its "client"
went away, which it answers as for a disconnecting client (leaves the queue, or closes the
upstream request so the backend aborts it and frees its KV cache) and releases its slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.proxy.endpoints import BACKGROUND_TENANT
from gateway.types import Message, Receive, Scope, Send

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    """HTTP status; 0 when the call was stopped before an answer."""
    body: bytes
    retry_after: float | None = None
    """Seconds the gateway advised waiting before a retry (`retry-after-ms`), if it did."""


async def call(
    handler: Handler, path: str, body: bytes, tenant: str, request_id: str, stop: asyncio.Event
) -> Answer:
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", request_id.encode()),
        ],
        "client": None,
        "server": None,
        BACKGROUND_TENANT: tenant,
    }
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await stop.wait()
        return {"type": "http.disconnect"}

    status = 0
    complete = False
    retry_after: float | None = None
    chunks: list[bytes] = []

    async def send(message: Message) -> None:
        nonlocal status, retry_after, complete
        if message["type"] == "http.response.start":
            status = message["status"]
            for name, value in message.get("headers", ()):
                if name == b"retry-after-ms":
                    retry_after = float(value) / 1000
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            complete = not message.get("more_body", False)

    await handler(scope, receive, send)
    if not complete:
        return Answer(0, b"")
    return Answer(status, b"".join(chunks), retry_after)
