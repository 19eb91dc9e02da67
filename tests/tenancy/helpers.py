"""Shared by the tenancy tests: a simulated backend, metrics read from /metrics, a poll helper."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import httpx


def metric(base: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels` (0 when there are none)."""
    text = httpx.get(f"{base}/metrics", timeout=5).text
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
        if m is None or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def wait_for(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
