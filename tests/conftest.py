"""Fixtures shared across test directories."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from tests.recording_backend import recording_backend


@pytest.fixture(scope="module")
def recorder() -> Iterator[ThreadingHTTPServer]:
    """A backend on loopback that records the headers of every POST (`recorder.seen`)."""
    with recording_backend() as server:
        yield server
