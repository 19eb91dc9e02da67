"""The scrape-time gauges of a real (unstarted) gateway: what /metrics shows as its state changes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gateway.app import Gateway
from gateway.config import parse_config
from gateway.config.source import ConfigSource
from tests.clock import FakeClock

A = {"url": "http://127.0.0.1:9", "name": "a", "min_concurrency": 2, "max_concurrency": 7}
B = {"url": "http://127.0.0.1:10", "name": "b"}
BASE = {"backends": [A, B], "controller": {"algorithm": "fixed", "params": {"limit": 5}}}


def series(gw: Gateway) -> dict[str, float]:
    """Every sample line of the exposition but `_created`, by name and labels."""
    text = gw.metrics.render().decode()
    found = re.findall(r"^(gateway_\S+) (\S+)$", text, flags=re.MULTILINE)
    return {name: float(value) for name, value in found if "_created" not in name}


def test_gauges_are_read_from_the_backends_when_scraped() -> None:
    gw = Gateway(parse_config(BASE), clock=FakeClock())
    held = gw.pool.backends[0].limiter.acquire()
    shown = series(gw)
    assert shown['gateway_inflight_requests{backend="a"}'] == 1
    assert shown['gateway_concurrency_limit{backend="a"}'] == 5
    assert shown['gateway_concurrency_floor{backend="a"}'] == 2
    assert shown['gateway_concurrency_ceiling{backend="a"}'] == 7
    assert shown['gateway_backend_up{backend="a"}'] == 0  # not checked yet
    assert shown['gateway_sla_target_seconds{signal="ttft"}'] == 1.0
    held.release(None)
    assert series(gw)['gateway_inflight_requests{backend="a"}'] == 0


def test_a_removed_backend_leaves_the_gauges_and_its_counters_keep_their_highest_total(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gateway.yaml"
    gw = Gateway(parse_config(BASE), clock=FakeClock(), source=ConfigSource(str(path), {}))
    a = gw.pool.backends[0]
    a.prefix_queries, a.prefix_hits = 100.0, 40.0
    assert series(gw)['gateway_backend_prefix_cache_queries_total{backend="a"}'] == 100
    a.prefix_queries = 30.0  # a count that went back does not take the counter down
    assert series(gw)['gateway_backend_prefix_cache_queries_total{backend="a"}'] == 100

    path.write_text(yaml.safe_dump({**BASE, "backends": [B], "sla": {"ttft_p90": 2.0}}))
    assert gw.reload().ok
    shown = series(gw)
    assert not [name for name in shown if 'backend="a"' in name and "prefix_cache" not in name]
    assert shown['gateway_backend_prefix_cache_hits_total{backend="a"}'] == 40
    assert shown['gateway_concurrency_limit{backend="b"}'] == 5
    assert shown['gateway_sla_target_seconds{signal="ttft"}'] == 2.0
    assert shown['gateway_backend_target_seconds{backend="b",signal="ttft"}'] == 1.5  # 2 s less q = 0.25


def test_each_backend_exports_the_engine_side_target_it_is_held_to() -> None:
    """A backend is held to the strictest client target of its models with the queue's share taken
    out of TTFT and e2e: "chat" (TTFT 2 s) and "embed" (e2e 0.8 s) at q = 0.25 give 1.5 s and 0.6 s,
    TPOT (the default's 0.05 s, which "chat" leaves out) is not a target; a backend serving only
    models without an entry of their own is held to the default's."""
    config = {
        **BASE,
        "backends": [{**A, "models": ["chat", "embed"]}, {**B, "models": ["other"]}],
        "sla": {
            "ttft_p90": 1.0,
            "tpot_p90": 0.05,
            "queue_share": 0.25,
            "models": {"chat": {"ttft_p90": 2.0}, "embed": {"e2e_p90": 0.8}},
        },
    }
    shown = series(Gateway(parse_config(config), clock=FakeClock()))
    targets = {k: v for k, v in shown.items() if k.startswith("gateway_backend_target_seconds")}
    assert targets == pytest.approx(
        {
            'gateway_backend_target_seconds{backend="a",signal="ttft"}': 1.5,
            'gateway_backend_target_seconds{backend="a",signal="e2e"}': 0.6,
            'gateway_backend_target_seconds{backend="b",signal="ttft"}': 0.75,
            'gateway_backend_target_seconds{backend="b",signal="tpot"}': 0.05,
        }
    )
    assert shown['gateway_sla_target_seconds{signal="ttft"}'] == 1.0  # the client-side default
