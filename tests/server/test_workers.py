"""`llm-gateway serve --workers N`: refused without Redis; with Redis, N processes on one port that
share state, a killed worker is started again, a stopped Redis shows in /metrics and /admin/state
and comes back, and SIGTERM stops every process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.procs import ROOT, Proc, free_port, spawn, spawn_sim
from tests.redis_server import RedisServer, running_redis


def test_more_than_one_worker_without_redis_is_refused_with_one_line() -> None:
    cmd = [sys.executable, "-m", "gateway.cli", "serve", "--backend", "http://127.0.0.1:9", "--workers", "2"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "llm-gateway: --workers 2 needs shared state: give --redis-url URL or state.redis_url "
        "(each worker alone would admit the whole limit)"
    ]


def test_more_than_one_worker_with_a_batch_data_dir_is_refused_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "backends": ["http://127.0.0.1:9"],
                "state": {"redis_url": "redis://127.0.0.1:9"},
                "batch": {"data_dir": str(tmp_path / "data")},
            }
        )
    )
    cmd = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--workers", "2"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "llm-gateway: --workers 2 cannot share batch.data_dir: run the Batch API in a gateway process "
        "of its own (each worker would resume every unfinished batch)"
    ]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # a new connection every time
        return str(response.read().decode())


def wait_for(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def coordination_by_worker(base: str, tries: int = 60) -> dict[int, dict[str, Any]]:
    """The coordination section of /admin/state per worker answering on the port, from `tries`
    requests (the owner it names holds the worker's pid)."""
    seen: dict[int, dict[str, Any]] = {}
    for _ in range(tries):
        coordination = json.loads(get(f"{base}/admin/state"))["coordination"]
        seen[int(coordination["owner"].split("/")[1])] = coordination
    return seen


def worker_pids(base: str, tries: int = 60) -> set[int]:
    """The pids of the workers answering on the port."""
    return set(coordination_by_worker(base, tries))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


def test_two_workers_share_a_port_and_redis_and_survive_a_killed_worker(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    config = tmp_path / "gateway.yaml"
    with spawn_sim() as sim:
        config.write_text(
            yaml.safe_dump(
                {
                    "backends": [sim.url],
                    "listen": {"host": "127.0.0.1", "port": port},
                    "state": {"redis_url": redis_server.url, "lease_seconds": 1.5, "timeout": 0.4},
                    "shutdown_grace": 2,
                }
            )
        )
        cmd = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--workers", "2"]
        gateway: Proc = spawn([*cmd, "--log-level", "warning"], f"{base}/health", base_url=base)
        with gateway:
            pids = set()
            wait_for("both workers answering", lambda: len(pids.update(worker_pids(base)) or pids) == 2)
            metric = re.compile(r"^gateway_coordination_up (\S+)$", re.MULTILINE)

            def coordination(value: str) -> Callable[[], bool]:
                return lambda: all(m == value for m in metric.findall(get(f"{base}/metrics")) or ["?"])

            wait_for("shared state", coordination("1.0"))

            def replicas() -> set[int]:
                return {json.loads(get(f"{base}/admin/state"))["coordination"]["replicas"] for _ in range(6)}

            wait_for("each worker counting two replicas", lambda: replicas() == {2})

            victim = min(pids)
            os.kill(victim, signal.SIGKILL)

            def restarted() -> bool:
                try:
                    return bool(worker_pids(base, 20) - pids)
                except OSError:  # a connection queued at the killed worker's socket is reset
                    return False

            wait_for("a new worker", restarted)
            assert gateway.alive()

            redis_server.stop()

            def every_worker_falls_back() -> bool:
                states = coordination_by_worker(base, 20)
                return len(states) == 2 and all(c["mode"] == "fallback" for c in states.values())

            wait_for("every worker in fallback", every_worker_falls_back)
            wait_for("the fallback", lambda: all(coordination("0.0")() for _ in range(6)))
            states = coordination_by_worker(base, 20)
            assert all(c["mode"] == "fallback" and c["reason"] for c in states.values())
            redis_server.start()
            wait_for("shared state again", lambda: all(coordination("1.0")() for _ in range(6)))

            workers = {p for p in worker_pids(base) if p != victim}
            os.kill(gateway.pid, signal.SIGTERM)
            assert gateway.popen.wait(15) == 0
            assert not any(alive(p) for p in workers)


def test_sighup_to_the_supervisor_reloads_every_worker(redis_server: RedisServer, tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    config = tmp_path / "gateway.yaml"
    with spawn_sim() as sim:
        settings = {
            "backends": [sim.url],
            "listen": {"host": "127.0.0.1", "port": port},
            "state": {"redis_url": redis_server.url},
            "sla": {"ttft_p90": 1.0},
        }
        config.write_text(yaml.safe_dump(settings))
        cmd = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--workers", "2"]
        with spawn([*cmd, "--log-level", "warning"], f"{base}/health", base_url=base) as gateway:
            pids: set[int] = set()
            wait_for("both workers answering", lambda: len(pids.update(worker_pids(base)) or pids) == 2)
            config.write_text(yaml.safe_dump({**settings, "sla": {"ttft_p90": 2.5}}))
            os.kill(gateway.pid, signal.SIGHUP)

            def reloaded() -> bool:
                states = [json.loads(get(f"{base}/admin/state")) for _ in range(20)]
                return {s["coordination"]["owner"].split("/")[1] for s in states} == {
                    str(p) for p in pids
                } and all(s["sla"] == {"ttft": 2.5} for s in states)

            wait_for("both workers on the new SLA", reloaded)
            assert gateway.alive() and worker_pids(base) == pids
