"""A reload applied to a gateway in-process: what stays, what is replaced, what is refused."""

from __future__ import annotations

from pathlib import Path

import yaml

from gateway.app import Gateway
from gateway.config import parse_config
from gateway.config.source import ConfigSource
from gateway.control.slots import Slot
from gateway.routing import RouteKey
from gateway.types import Direction, Sample
from tests.clock import FakeClock
from tests.pool.pool_helpers import take

A = {"url": "http://127.0.0.1:9", "name": "a"}
B = {"url": "http://127.0.0.1:10", "name": "b"}
BASE = {
    "backends": [A],
    "controller": {"algorithm": "aimd", "params": {"initial": 3}, "min_samples": 1},
    "sla": {"ttft_p90": 10.0},
}


def learned(gw: Gateway) -> list[Slot]:
    """Back `a` up to a limit of 4 it learned (binding, under target); returns its held slots."""
    limiter = gw.pool.backends[0].limiter
    slots = [limiter.acquire() for _ in range(3)]
    slots.pop().release(Sample(dispatched_at=0.0, e2e=0.1, output_tokens=5))
    slots.append(limiter.acquire())
    assert limiter.tick(queued=1).direction is Direction.UP and limiter.limit == 4
    return slots


def reload_from(gw: Gateway, path: Path, config: dict[str, object]) -> tuple[bool, tuple[str, ...]]:
    path.write_text(yaml.safe_dump(config))
    result = gw.reload()
    return result.ok, result.changes or result.problems


def test_backends_are_added_and_removed_and_the_ones_that_stay_keep_what_they_learned(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    gw = Gateway(parse_config(BASE), clock=FakeClock(), source=ConfigSource(str(path), {}))
    a = gw.pool.backends[0]
    slots = learned(gw)
    algorithm = a.limiter.algorithm

    ok, changes = reload_from(
        gw, path, {**BASE, "backends": [A, B], "sla": {"ttft_p90": 5.0}, "queue": {"timeout": 3}}
    )
    assert ok and changes == ("backend b added", "sla changed", "queue changed")
    assert [b.name for b in gw.pool.backends] == ["a", "b"] and gw.pool.backends[0] is a
    assert a.limiter.limit == 4 and a.limiter.algorithm is not algorithm  # new SLA, same limit
    assert gw.pool.backends[1].limiter.limit == 3 and gw.config.queue.timeout == 3

    ok, changes = reload_from(gw, path, {**BASE, "backends": [B]})
    assert ok and changes[0] == "backend a removed"
    assert [b.name for b in gw.pool.backends] == ["b"]
    for slot in slots:  # requests still running on the removed backend finish there
        slot.release(None)
    assert a.limiter.inflight == 0


def test_an_invalid_file_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    config = parse_config(BASE)
    gw = Gateway(config, clock=FakeClock(), source=ConfigSource(str(path), {}))
    ok, problems = reload_from(gw, path, {**BASE, "backends": [{"url": "ftp://x"}], "queue": {"timeout": -1}})
    assert not ok and len(problems) == 2
    assert gw.config is config and [b.name for b in gw.pool.backends] == ["a"]


def test_the_listeners_stay_as_they_were_bound(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    config = parse_config({**BASE, "listen": {"port": 8080, "max_connections": 10}})
    gw = Gateway(config, clock=FakeClock(), source=ConfigSource(str(path), {}))
    ok, _ = reload_from(gw, path, {**BASE, "listen": {"port": 9999, "max_connections": 20}, "retries": 0})
    assert ok and gw.config.port == 8080 and gw.config.limits.max_connections == 10 and gw.config.retries == 0


def test_routing_changes_apply_and_a_removed_backend_is_forgotten(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    gw = Gateway(
        parse_config({**BASE, "backends": [A, B]}), clock=FakeClock(), source=ConfigSource(str(path), {})
    )
    for b in gw.pool.backends:
        b.models = frozenset({"m"})
        b.mark_healthy()
    strategy = gw.pool.strategy
    lease = take(gw.pool, "m", RouteKey(prompt="d" * 2000))
    assert lease is not None and strategy.report(lease.backend, 0) is not None
    lease.release(None)
    queue = gw.queues.queue("m")

    ok, changes = reload_from(gw, path, {**BASE, "backends": [A, B], "routing": {"lookahead": 4}})
    assert ok and changes == ("routing changed",)
    assert gw.pool.strategy is strategy and queue.lookahead == 4  # the index is kept

    ok, _ = reload_from(gw, path, {**BASE, "backends": [A] if lease.backend == "b" else [B]})
    assert ok and strategy.report(lease.backend, 0) == (0, 0, 0)  # what it cached is forgotten

    ok, changes = reload_from(gw, path, {**BASE, "routing": {"strategy": "round_robin"}})
    assert ok and "routing changed" in changes and gw.pool.strategy.name == "round_robin"
