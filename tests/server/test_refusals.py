"""Refusals written straight to a transport: whole HTTP/1.1 answers in OpenAI's error shape."""

from __future__ import annotations

from gateway.proxy.errors import GatewayError
from gateway.server.refusals import raw_response, upgrade_refusal


def test_a_refusal_written_before_any_request_exists_has_a_request_id() -> None:
    head, _, body = raw_response(GatewayError(408, "late", "request_timeout")).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 408 Request Timeout"
    (rid,) = [line for line in lines if line.startswith(b"x-request-id: ")]
    assert len(rid) == len(b"x-request-id: ") + 24
    assert b'"code":"request_timeout"' in body


def test_a_protocol_switch_is_refused_naming_what_was_asked() -> None:
    err = upgrade_refusal(b"GET", [(b"connection", b"upgrade"), (b"upgrade", b"websocket")])
    assert (err.status, err.code) == (400, "unsupported_upgrade")
    assert "'websocket'" in err.message
    assert upgrade_refusal(b"CONNECT", []).message.startswith("CONNECT is not served")
