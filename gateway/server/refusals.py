"""Refusals written straight to a client's transport, outside any application: complete HTTP/1.1
responses in OpenAI's error shape that close the connection.

The listener (gateway.server.listener) writes them for what it refuses before a request reaches
the application (a head too large or too slow, a protocol switch), the acceptor
(gateway.server.acceptor) for a connection over the cap. Each carries an `x-request-id` of its own,
since no request exists yet to give it one.
"""

from __future__ import annotations

import http
import os

from gateway.proxy.errors import GatewayError


def upgrade_refusal(method: bytes, headers: list[tuple[bytes, bytes]]) -> GatewayError:
    """400 for a request asking to switch protocols, naming (an excerpt of) what it asked for."""
    if method == b"CONNECT":
        return GatewayError(400, "CONNECT is not served: send HTTP/1.1 requests", "unsupported_upgrade")
    wanted = next((value for name, value in headers if name == b"upgrade"), b"")
    excerpt = wanted[:64].decode("ascii", "replace")
    return GatewayError(
        400, f"protocol switch to {excerpt!r} is not served: send HTTP/1.1 requests", "unsupported_upgrade"
    )


def raw_response(err: GatewayError) -> bytes:
    """A complete HTTP/1.1 response for `err`, closing the connection."""
    body = err.body()
    head = [f"HTTP/1.1 {err.status} {http.HTTPStatus(err.status).phrase}".encode()]
    head.extend(name + b": " + value for name, value in err.headers())
    head.append(b"x-request-id: " + os.urandom(12).hex().encode())
    head.append(b"content-length: %d" % len(body))
    head.append(b"connection: close")
    return b"\r\n".join(head) + b"\r\n\r\n" + body
