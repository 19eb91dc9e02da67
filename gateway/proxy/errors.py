"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.

The OpenAI SDK maps the status to an exception class and reads `retry-after-ms`, `retry-after` and
`x-should-retry`, so a shed answer carries all three when it has an honest estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    431: "invalid_request_error",
    502: "api_error",
    503: "service_unavailable_error",
    504: "timeout_error",
}


@dataclass(slots=True)
class GatewayError(Exception):
    status: int
    message: str
    code: str
    param: str | None = None
    retry_after: float | None = None
    should_retry: bool | None = None
    extra_headers: tuple[tuple[bytes, bytes], ...] = ()

    def body(self) -> bytes:
        return orjson.dumps(
            {
                "error": {
                    "message": self.message,
                    "type": _TYPES.get(self.status, "api_error"),
                    "param": self.param,
                    "code": self.code,
                }
            }
        )

    def headers(self) -> list[tuple[bytes, bytes]]:
        out = [(b"content-type", b"application/json")]
        if self.retry_after is not None:
            seconds = max(0.0, self.retry_after)
            out.append((b"retry-after", str(max(1, math.ceil(seconds))).encode()))
            out.append((b"retry-after-ms", str(max(1, round(seconds * 1000))).encode()))
        if self.should_retry is not None:
            out.append((b"x-should-retry", b"true" if self.should_retry else b"false"))
        out.extend(self.extra_headers)
        return out


EXCERPT_CHARS = 64
"""Characters of a client's value an error quotes: enough to recognise it, never the whole of it."""


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """`value` as an error quotes it: repr of a string, JSON's type name of anything else, cut to
    `limit` characters with the length said, so an error never repeats a large input."""
    if value is None:
        return "null"
    if not isinstance(value, str | int | float):
        return "an object" if isinstance(value, dict) else "an array"
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(value)
    return f"{text[:limit]!r}... ({len(text)} characters)"
