"""`/admin/state` gives moments as wall-clock times (ISO 8601, UTC) beside their age."""

from __future__ import annotations

import time
from datetime import datetime

import httpx

from tests.procs import spawn_gateway


def wall(text: str) -> float:
    assert text.endswith("Z")
    return datetime.fromisoformat(text).timestamp()


def test_times_are_wall_clock_iso_8601_with_their_age() -> None:
    before = time.time()
    config = {"backends": [{"url": "http://127.0.0.1:9", "name": "b", "models": ["m"]}]}
    with spawn_gateway(config) as gw:
        state = httpx.get(f"{gw.url}/admin/state").json()
    after = time.time()
    now, started = wall(state["time"]), wall(state["started_at"])
    assert before - 0.01 <= started <= now <= after + 0.01
    assert abs((now - started) - state["uptime_seconds"]) < 0.01
    (backend,) = state["backends"]
    changed = wall(backend["last_change_at"])
    assert started - 0.01 <= changed <= now
    assert abs((now - changed) - backend["last_change_seconds_ago"]) < 0.01
