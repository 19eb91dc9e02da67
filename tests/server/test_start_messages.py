"""What the server says at start about its own limits."""

from __future__ import annotations

import logging

import pytest

from gateway.server.serve import ADMIN_CONNECTIONS, RESERVED_FDS, _log_fd_cap


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
