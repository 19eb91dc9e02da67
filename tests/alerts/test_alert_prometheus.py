"""The shipped configuration in a real Prometheus (Debian's binary, on loopback).

The target scraped here is the gateway's own metrics registry (`gateway.metrics.Metrics`) served
over HTTP, reading a gateway state made up by the test: it checks that what the gateway exports,
the config and the rules fit together. The run under real overload, with real gateways, simulated backends and
Alertmanager delivering to a webhook, is test_alert_e2e.py.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from prom import (
    ALERTS,
    PROMETHEUS_CONFIG,
    StartPrometheus,
    format_duration,
    minimal_config,
    parse_duration,
    running_prometheus,
    scale_durations,
    tool,
)

from gateway.metrics import Metrics
from gateway.types import SLA, Decision, EngineStats, Signal


@contextmanager
def serve_metrics(metrics: Metrics) -> Iterator[str]:
    """`metrics` rendered at http://127.0.0.1:PORT/metrics; yields host:port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = metrics.render()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass
class FullLimiter:
    inflight: int = 4
    limit: int = 4
    ceiling: int = 20
    floor: int = 1
    last_decision: Decision | None = None
    sla: SLA = field(default_factory=lambda: SLA(ttft_p90=0.75))
    """Engine-side: the client's 1 s (Config) less a queue share of 0.25."""

    def p90(self) -> dict[Signal, float]:
        return {}


@dataclass
class FullBackend:
    name: str = "b1"
    limiter: FullLimiter = field(default_factory=FullLimiter)
    background_inflight: int = 0
    engine_stats: EngineStats | None = None
    prefix_queries: float = 0.0
    prefix_hits: float = 0.0
    cache_epoch: int = 0

    def in_rotation(self, now: float) -> bool:
        return True


@dataclass
class NoIndex:
    def report(self, backend: str, epoch: int) -> None:
        return None


@dataclass
class OneBackendPool:
    backends: tuple[FullBackend, ...] = (FullBackend(),)
    strategy: NoIndex = field(default_factory=NoIndex)


@dataclass
class Queue:
    depth: int


@dataclass
class WaitingQueues:
    by_model: dict[str, Queue] = field(default_factory=lambda: {"llama": Queue(6)})

    def capacity_exhausted(self, model: str) -> bool:
        return True


@dataclass
class Config:
    sla: SLA = field(default_factory=lambda: SLA(ttft_p90=1.0))


@dataclass
class AtCapacity:
    """One backend full at its limit, requests queued: what the gateway exports when exhausted."""

    config: Config = field(default_factory=Config)
    pool: OneBackendPool = field(default_factory=OneBackendPool)
    queues: WaitingQueues = field(default_factory=WaitingQueues)
    batches: None = None
    coordinator: None = None

    def clock(self) -> float:
        return 0.0


def gateway_at_capacity() -> Metrics:
    m = Metrics()
    m.live.read_from(AtCapacity())
    return m


def test_durations_round_trip_and_scale() -> None:
    assert parse_duration("5m") == 300
    assert parse_duration("1h30m") == 5400
    assert parse_duration("250ms") == 0.25
    with pytest.raises(ValueError):
        parse_duration("5 minutes")
    assert format_duration(5) == "5s"
    assert format_duration(0.5) == "500ms"
    text = "for: 5m\nexpr: rate(x[2m]) > 0 and avg_over_time(y[5m]) > 1\n    for: 10m\n"
    assert scale_durations(text, 1 / 60) == (
        "for: 5s\nexpr: rate(x[2s]) > 0 and avg_over_time(y[5s]) > 1\n    for: 10s\n"
    )


def test_scaled_rules_are_still_valid(tmp_path: Path) -> None:
    scaled = tmp_path / "alerts.yml"
    scaled.write_text(scale_durations(ALERTS.read_text(), 1 / 60))
    result = subprocess.run(
        [str(tool("promtool")), "check", "rules", str(scaled)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rules = yaml.safe_load(scaled.read_text())["groups"][0]["rules"]
    assert {r["for"] for r in rules} <= {"1s", "2s", "5s"}


def test_prometheus_starts_loads_the_rules_and_stops_by_pid(tmp_path: Path) -> None:
    with running_prometheus(minimal_config(), tmp_path, rules=[ALERTS]) as prom:
        pid = prom.pid
        build = prom.get_json("/api/v1/status/buildinfo")["data"]
        assert build["version"].startswith("2.")
        groups = prom.get_json("/api/v1/rules", type="alert")["data"]["groups"]
        loaded = {r["name"]: r for g in groups for r in g["rules"]}
        assert len(loaded) == 11
        assert loaded["GatewayDown"]["labels"]["severity"] == "critical"
        assert loaded["GatewayCapacityExhausted"]["duration"] == 300
        assert all(r["health"] != "err" for r in loaded.values())
    assert prom.popen.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# Prometheus 2.42 hands discovered targets to the scraper after about 5 s, whatever the interval.
@pytest.mark.slow
def test_shipped_config_scrapes_the_gateway_metrics(
    prometheus_server: StartPrometheus, tmp_path: Path
) -> None:
    """config/prometheus.yml as shipped, with only its targets and interval changed for the test."""
    cfg = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    with serve_metrics(gateway_at_capacity()) as target:
        for job in cfg["scrape_configs"]:
            if job["job_name"] == "llm-gateway":
                job["static_configs"] = [{"targets": [target]}]
            else:
                job["static_configs"] = []
        prom = prometheus_server(cfg, rules=[ALERTS])
        deadline = time.monotonic() + 20
        while not prom.query('gateway_capacity_exhausted{job="llm-gateway"} == 1'):
            assert time.monotonic() < deadline, "the gateway's metrics never arrived"
            time.sleep(0.25)
        up = prom.query('up{job="llm-gateway"}')
        assert [s["value"][1] for s in up] == ["1"]
        target = prom.query('gateway_backend_target_seconds{job="llm-gateway",backend="b1"}')
        assert [(s["metric"]["signal"], s["value"][1]) for s in target] == [("ttft", "0.75")]
        # The alert is evaluated against the scraped series: pending (its `for:` is 5m here).
        alert = prom.wait_for_alert("GatewayCapacityExhausted", "pending", timeout=20)
        assert alert is not None
        assert alert["labels"]["model"] == "llama"
