"""What the server says at start about its own limits, and its bare HTTP refusals."""

from __future__ import annotations

import logging

import pytest

from gateway.proxy.errors import GatewayError
from gateway.server.listener import raw_response
from gateway.server.serve import ADMIN_CONNECTIONS, RESERVED_FDS, _log_fd_cap


def test_a_refusal_written_before_any_request_exists_has_a_request_id() -> None:
    head, _, body = raw_response(GatewayError(408, "late", "request_timeout")).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 408 Request Timeout"
    (rid,) = [line for line in lines if line.startswith(b"x-request-id: ")]
    assert len(rid) == len(b"x-request-id: ") + 24
    assert b'"code":"request_timeout"' in body


@pytest.mark.parametrize(("wanted", "level"), [(16384, logging.INFO), (50000, logging.WARNING)])
def test_the_descriptor_cap_is_a_warning_only_under_a_max_connections_the_user_set(
    caplog: pytest.LogCaptureFixture, wanted: int, level: int
) -> None:
    with caplog.at_level(logging.INFO, logger="gateway.server.serve"):
        _log_fd_cap(9968, wanted, 20000)
    (record,) = caplog.records
    assert record.levelno == level
    message = record.getMessage()
    assert "ulimit -Hn" in message and "lower listen.max_connections" in message
    assert f"to {2 * wanted + RESERVED_FDS + ADMIN_CONNECTIONS}, or" in message
