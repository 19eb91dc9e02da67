"""ASGI plumbing every endpoint shares: read a bounded body, answer JSON, answer an error.

Raw ASGI rather than a framework's request object: the hot endpoints need the receive channel for
themselves (to notice a client that goes away), so the body is read here, message by message, and
refused as soon as it passes the limit instead of after it was buffered.
"""

from __future__ import annotations

import contextlib
import os

import orjson

from gateway.proxy.errors import GatewayError
from gateway.proxy.request import client_request_id
from gateway.types import Receive, Scope, Send

ABORT = "gateway.abort"
"""Scope extension the server provides (gateway.server.listener): a callable that aborts the client
connection of the current request, for a response that cannot be completed."""
GONE = "gateway.client_gone"
"""Scope extension the application may set, under a server that provides `ABORT`: a callable the
server calls once, when the request's client disconnects (or is cut off) before the response ends.
It spares a task per request that would wait in `receive` for the disconnect."""


class ClientGone(Exception):
    """The client disconnected before its request was read."""


REQUEST_ID = "llm_gateway.request_id"
"""Scope key where an endpoint keeps the id it gave the request, so its error answer repeats it."""


def request_id_of(scope: Scope | None) -> str:
    """The id an answer carries in `x-request-id`: the one the request was given, else the client's
    own when worth keeping (gateway.proxy.request), else a fresh one."""
    if scope is None:
        return os.urandom(12).hex()
    given: str | None = scope.get(REQUEST_ID)
    if given:
        return given
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id" and (kept := client_request_id(value)) is not None:
            return kept
    return os.urandom(12).hex()


async def read_body(receive: Receive, limit: int) -> bytes:
    """The request body, refusing with 413 as soon as it passes `limit` (reading no more)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise GatewayError(413, f"request body is over the limit of {limit} bytes", "request_too_large")
        parts.append(chunk)
        if not message.get("more_body"):
            return parts[0] if len(parts) == 1 else b"".join(parts)


async def respond_error(send: Send, err: GatewayError, scope: Scope | None = None) -> None:
    """Answer `err`, with an `x-request-id` as every answer has (see `request_id_of`)."""
    headers = err.headers()
    headers.append((b"x-request-id", request_id_of(scope).encode()))
    with contextlib.suppress(RuntimeError):  # a response already started cannot be replaced
        await send({"type": "http.response.start", "status": err.status, "headers": headers})
        await send({"type": "http.response.body", "body": err.body()})


async def send_json(send: Send, status: int, payload: object) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": orjson.dumps(payload)})
