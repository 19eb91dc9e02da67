"""`x-priority` may lower a request's priority or choose within its tenant's range, never raise it
above: a batch tenant that sent `x-priority: 1000` used to be served before the priority-1 tenant.

One slot (a fixed limit of 1) held by a long request; four requests queue behind it in a known
order; the order in which they are then served is the order of their priorities. The order of
service is read from the gateway, not from when the client threads see the answers (a busy machine
can delay a thread by more than a generation): each request arrived between its send and the moment
the test saw the queue grow, and its answer says how long it waited there, so it left the queue at
its arrival plus the wait, to within half a look at the queue; each queued request generates 32
tokens, so consecutive requests leave it a whole generation apart.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.procs import Proc, spawn_gateway, spawn_sim

TENANTS = [
    {"name": "gold", "api_keys": ["gold-key"], "priority": 1},
    {"name": "batch", "api_keys": ["batch-key"], "priority": 0},
    {"name": "flex", "api_keys": ["flex-key"], "priority": 0, "max_priority": 5},
]


@pytest.fixture(scope="module")
def gateway() -> Iterator[Proc]:
    config = {
        "backends": [],
        "controller": {"algorithm": "fixed", "params": {"limit": 1}},
        "tenants": TENANTS,
    }
    with spawn_sim("--profile", "tiny-cpu") as sim:
        config["backends"] = [sim.url]
        with spawn_gateway(config) as gw:
            yield gw


def depth(gw: Proc) -> tuple[int, int]:
    """(requests in flight, requests queued)."""
    state = httpx.get(f"{gw.url}/admin/state", timeout=10).json()
    inflight = sum(b["inflight"] for b in state["backends"])
    return inflight, sum(m["depth"] for m in state["models"].values())


def wait_for(gw: Proc, want: tuple[int, int]) -> None:
    deadline = time.monotonic() + 10
    while depth(gw) != want:
        assert time.monotonic() < deadline, f"state {depth(gw)} never became {want}"
        time.sleep(0.01)


# Serial: the blocker's 800 tokens must outlast four requests queueing behind it, one look at the
# queue after each; with the other test files' workers on the cores the blocker can finish first.
@pytest.mark.serial
def test_x_priority_lowers_or_chooses_within_the_tenant_range_never_above(gateway: Proc) -> None:
    waited: dict[str, float] = {}

    def send(label: str, key: str, priority: str | None, max_tokens: int) -> None:
        # They wait behind the blocker on purpose: clients that would rather wait than be refused.
        headers = {"authorization": f"Bearer {key}", "x-queue-timeout": "60"}
        if priority is not None:
            headers["x-priority"] = priority
        body = {"model": "tiny-llama", "prompt": "x", "max_tokens": max_tokens, "ignore_eos": True}
        resp = httpx.post(f"{gateway.url}/v1/completions", json=body, headers=headers, timeout=60)
        assert resp.status_code == 200, resp.text
        waited[label] = float(resp.headers["x-gateway-queue-wait"])

    threads: list[threading.Thread] = []

    def start(label: str, key: str, priority: str | None, max_tokens: int = 32) -> None:
        thread = threading.Thread(target=send, args=(label, key, priority, max_tokens))
        thread.start()
        threads.append(thread)

    arrived: dict[str, float] = {"blocker": time.monotonic()}
    start("blocker", "gold-key", None, max_tokens=800)
    wait_for(gateway, (1, 0))
    for queued, (label, key, priority) in enumerate(
        [
            ("batch asking 1000", "batch-key", "1000"),  # counts as 0, its tenant's priority
            ("gold lowered to -5", "gold-key", "-5"),
            ("gold", "gold-key", None),  # 1
            ("flex asking 1000", "flex-key", "1000"),  # counts as 5, its tenant's maximum
        ],
        start=1,
    ):
        sent = time.monotonic()
        start(label, key, priority)
        wait_for(gateway, (1, queued))
        arrived[label] = (sent + time.monotonic()) / 2  # between the send and the queue's growth
    for thread in threads:
        thread.join(60)
    served = sorted(waited, key=lambda label: arrived[label] + waited[label])
    assert served == ["blocker", "flex asking 1000", "gold", "batch asking 1000", "gold lowered to -5"]
