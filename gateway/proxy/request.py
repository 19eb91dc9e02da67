"""Reading a client's request: the headers that matter, what is forwarded, and the body's model.

Pure functions; every problem is a `GatewayError` (a 4xx in OpenAI's shape), never another exception.

Bounds, each because a client chooses the value and the gateway repeats it:
- `model` at most `MAX_MODEL_CHARS` (256) characters, else 400 before anything else looks at it:
  the name is echoed in errors and logged, and the longest names on Hugging Face are under 100.
- `x-request-id` kept only when at most `MAX_REQUEST_ID` (128) visible ASCII characters, else
  replaced by a fresh id: it is forwarded, echoed and logged, and is for correlating, not carrying.
- `content-length` over 19 digits reads as too large (Python refuses to parse 4,300 digits).

Credentials: the backend gets the gateway's own key (`Authorization`, per backend), and nothing a
client meant for somebody else: `CREDENTIAL_HEADERS` (API keys in the forms other providers take
them, cookies, OpenAI account headers; see gateway.config) are dropped before forwarding, with any
the config names as sensitive, unless the config lets them pass.

Forwarding: a header the request's `Connection` names is hop-by-hop (RFC 9110 7.6.1) and stays here,
as do the gateway's own controls (`x-priority`, `x-queue-timeout`, `x-session-id`). The client's
address is appended to `X-Forwarded-For`, whatever the client put there kept before it and never
believed. Values go as the client sent their bytes: the backend client writes UTF-8, so a value that
is not UTF-8 could not arrive unchanged, and is not forwarded at all.

Priority: `x-priority` may lower a request's priority or choose within what its tenant is allowed
(`priority` up to `max_priority`); a value above that counts as the maximum, never more.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.config import CREDENTIAL_HEADERS, MIN_PRIORITY
from gateway.proxy.errors import GatewayError
from gateway.proxy.json_cost import json_cost_problem
from gateway.routing import RouteKey
from gateway.tenancy.estimate import max_output_tokens, prompt_tokens

MAX_MODEL_CHARS = 256
MAX_REQUEST_ID = 128
_MAX_LENGTH_DIGITS = 19
_REQUEST_ID = re.compile(rb"[!-~]{1,%d}" % MAX_REQUEST_ID)


@dataclass(slots=True)
class RequestHead:
    """What the gateway reads from a request's headers."""

    content_length: int = -1
    """-1 when absent or not a number."""
    auth: bytes | None = None
    request_id: str = ""
    priority: bytes | None = None
    timeout: bytes | None = None
    session: str | None = None
    """`x-session-id`: the conversation a request belongs to, for routing."""
    forward: dict[str, str] = field(default_factory=dict)
    """Headers for the backend: all but the dropped ones, plus the request id."""


def read_head(
    headers: Iterable[tuple[bytes, bytes]],
    dropped: frozenset[bytes],
    client: tuple[str, int] | None = None,
) -> RequestHead:
    """The head of a request from its (lower-case) ASGI headers; `dropped` are never forwarded,
    nor the headers `Connection` names; `client` (its address) is appended to X-Forwarded-For."""
    head = RequestHead()
    request_id = None
    hop: list[bytes] = []
    for name, value in headers:
        if name == b"content-length":
            head.content_length = content_length(value)
        elif name == b"authorization":
            head.auth = value
        elif name == b"x-request-id":
            request_id = client_request_id(value)
        elif name == b"x-priority":
            head.priority = value
        elif name == b"x-queue-timeout":
            head.timeout = value
        elif name == b"x-session-id":
            head.session = value.decode("latin-1")
        elif name == b"connection" or name == b"x-forwarded-for":
            hop.append(name + b":" + value)
        if name not in dropped:
            try:  # noqa: SIM105 - per header on the hot path: cheaper than a context manager
                head.forward[name.decode("latin-1")] = value.decode("utf-8")
            except UnicodeDecodeError:
                pass  # not UTF-8: it could not reach the backend as sent (see the module's docstring)
    if hop:
        _drop_named(head.forward, hop)
    head.request_id = request_id or os.urandom(12).hex()
    head.forward["x-request-id"] = head.request_id
    if client is not None:
        prior = head.forward.pop("x-forwarded-for", "")
        head.forward["x-forwarded-for"] = f"{prior}, {client[0]}" if prior else client[0]
    return head


def _drop_named(forward: dict[str, str], hop: list[bytes]) -> None:
    """Drop the headers `Connection` names; join the client's X-Forwarded-For lines into one entry
    of `forward` (to be appended to)."""
    chain: list[str] = []
    for line in hop:
        name, _, value = line.partition(b":")
        if name == b"connection":
            for token in value.split(b","):
                forward.pop(token.strip().lower().decode("latin-1"), None)
        elif value.strip():
            chain.append(value.strip().decode("utf-8", "replace"))
    if chain:
        forward["x-forwarded-for"] = ", ".join(chain)


def content_length(value: bytes) -> int:
    """A Content-Length value: its number (10**19 past 19 significant digits, however many zeros
    lead), or -1 when it is not ASCII digits."""
    if not value.isdigit():
        return -1
    digits = value.lstrip(b"0")
    return int(digits or b"0") if len(digits) <= _MAX_LENGTH_DIGITS else 10**_MAX_LENGTH_DIGITS


def client_request_id(value: bytes) -> str | None:
    """The client's request id if it is one worth keeping (short, visible ASCII), else None."""
    return value.decode("ascii") if _REQUEST_ID.fullmatch(value) else None


def dropped_headers(
    base: Iterable[bytes], sensitive: Iterable[str], passed: Iterable[str]
) -> frozenset[bytes]:
    """Headers never forwarded: `base`, the credentials and `sensitive`, less those `passed`."""
    let_through = {p.lower().encode("latin-1") for p in passed}
    secret = CREDENTIAL_HEADERS | {s.lower().encode("latin-1") for s in sensitive}
    return frozenset(base) | (secret - let_through)


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    model: str
    streaming: bool
    route: RouteKey
    prompt_tokens: int
    """Estimated (gateway.tenancy.estimate): what fair sharing and quotas charge until `usage` says."""
    max_tokens: int | None = None
    """The output tokens it allows itself, if it says."""

    @property
    def most_tokens(self) -> int | None:
        """Prompt (estimated) and output tokens one of its sequences holds at most, if it says."""
        return None if self.max_tokens is None else self.prompt_tokens + self.max_tokens


def parse_request(body: bytes, session: str | None = None, tenant: str = "") -> tuple[str, bool, RouteKey]:
    """(model, streaming, what to route by) from an OpenAI request body, or a 400 in OpenAI's shape."""
    parsed = parse_body(body, session, tenant)
    return parsed.model, parsed.streaming, parsed.route


def parse_body(body: bytes, session: str | None = None, tenant: str = "") -> ParsedRequest:
    """What the gateway reads from an OpenAI request body, or a 400 in OpenAI's shape.

    The routing key keeps references into the parsed body and hashes the prompt only if a routing
    strategy asks; its session is the `x-session-id` header, else the body's `user`; its partition
    is the tenant's and the body's `cache_salt`.
    """
    payload = json_object(body)
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise GatewayError(400, "you must provide a model parameter", "missing_model", param="model")
    if len(model) > MAX_MODEL_CHARS:
        raise GatewayError(
            400,
            f"model names are at most {MAX_MODEL_CHARS} characters; this one has {len(model)}",
            "model_too_long",
            param="model",
        )
    return ParsedRequest(
        model,
        payload.get("stream") is True,
        RouteKey.from_body(payload, session, tenant),
        prompt_tokens(payload),
        max_output_tokens(payload),
    )


def json_object(body: bytes) -> dict[str, Any]:
    """A request body that must be one JSON object, or a 400 in OpenAI's shape (also when it could
    hold more values than are parsed on the event loop: gateway.proxy.json_cost)."""
    problem = json_cost_problem(body)
    if problem is not None:
        raise GatewayError(400, f"request body has {problem}", "json_too_complex")
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise GatewayError(400, f"request body is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(payload, dict):
        raise GatewayError(400, "request body must be a JSON object", "invalid_request")
    return payload


def parse_priority(header: bytes | None, default: int, maximum: int) -> int:
    """The request's priority: `default` (its tenant's), or what `x-priority` asks for within
    [MIN_PRIORITY, maximum]. Not an integer: 400."""
    if header is None:
        return default
    try:
        asked = int(header)
    except ValueError:
        raise GatewayError(
            400, "x-priority must be an integer", "invalid_priority", param="x-priority"
        ) from None
    return max(MIN_PRIORITY, min(asked, maximum))


def parse_seconds(header: bytes | None) -> float | None:
    """`x-queue-timeout`: a positive number of seconds, or None when absent."""
    if header is None:
        return None
    try:
        value = float(header)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise GatewayError(
            400,
            "x-queue-timeout must be a positive number of seconds",
            "invalid_timeout",
            param="x-queue-timeout",
        )
    return value
