"""End to end: a real gateway in front of simulated vLLM servers, scraped by a real Prometheus with the
shipped config and rules, alerting through a real Alertmanager to a webhook.

Two gateways, `main` and `spare`, front the same two simulated backends (`llm-gateway sim`). Each pins
a fixed limit of 2 per backend, so 20 concurrent streams keep about 16 requests waiting in the main
gateway's queue: its capacity is exhausted. Prometheus runs config/prometheus.yml with only its
targets and intervals (1 s) changed, and config/alerts.yml with every duration divided by 60, so the
5-minute windows and `for:` of the rules take 5 seconds. The spare gateway is stopped by one test to
show GatewayDown; the main one carries the overload. Neither test depends on the other's outcome.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from overload import Overload
from prom import (
    ALERTS,
    PROMETHEUS_CONFIG,
    Server,
    WebhookReceiver,
    running_alertmanager,
    running_prometheus,
    scale_durations,
    webhook_receiver,
)
from prometheus_client.parser import text_string_to_metric_families

from tests.procs import Proc, spawn_gateway, spawn_sim

pytestmark = pytest.mark.slow

PROFILE = "gemma3-4b-rtx4080"
MODEL = "google/gemma-3-4b-it"
LIMIT = 2


@dataclass
class Stack:
    sims: list[Proc]
    main: Proc
    spare: Proc
    prom: Server
    alertmanager: Server
    hook: WebhookReceiver


def host_port(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll `check` until it returns something truthy; AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s (last: {result!r})")
        time.sleep(interval)


def gateway_config(sims: list[Proc]) -> dict[str, object]:
    return {
        "backends": [{"url": s.url, "name": f"sim-{i}"} for i, s in enumerate(sims)],
        "controller": {"algorithm": "fixed", "params": {"limit": LIMIT}},
        "health": {"interval": 0.2},
        # Long enough that a busy machine never turns the queued requests into 503s.
        "queue": {"timeout": 120},
    }


def prometheus_config(gateways: list[str], sims: list[str], alertmanager: str) -> dict[str, Any]:
    """The shipped config/prometheus.yml, pointed at the test's processes and made fast."""
    cfg: dict[str, Any] = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    targets = {"llm-gateway": gateways, "vllm": sims}
    for job in cfg["scrape_configs"]:
        job["static_configs"] = [{"targets": targets[job["job_name"]]}]
    cfg["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return cfg


def alertmanager_config(webhook_url: str) -> dict[str, Any]:
    """Every alert to one webhook, grouped per alert, instance and model, sent within a second."""
    return {
        "route": {
            "receiver": "hook",
            "group_by": ["alertname", "instance", "model"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "hook", "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir: Path = tmp_path_factory.mktemp("e2e")
    profile = ("--profile", PROFILE)
    with (
        spawn_sim(*profile, "--seed", "1") as sim_a,
        spawn_sim(*profile, "--seed", "2") as sim_b,
        spawn_gateway(gateway_config([sim_a, sim_b])) as main,
        spawn_gateway(gateway_config([sim_a, sim_b])) as spare,
        webhook_receiver() as hook,
        running_alertmanager(alertmanager_config(hook.url), workdir / "alertmanager") as am,
    ):
        cfg = prometheus_config(
            [host_port(main.url), host_port(spare.url)],
            [host_port(sim_a.url), host_port(sim_b.url)],
            host_port(am.url),
        )
        rules = {"alerts.yml": scale_durations(ALERTS.read_text(), 1 / 60)}
        with running_prometheus(cfg, workdir / "prometheus", rules=rules) as prom:
            # Prometheus 2.42 takes about 5 s to start scraping new targets.
            wait_until(lambda: len(prom.query("up == 1")) == 4, 30, "all four targets scraped and up")
            yield Stack([sim_a, sim_b], main, spare, prom, am, hook)


def gateway_gauge(gateway: Proc, name: str, **labels: str) -> float | None:
    """The value of one series on the gateway's own /metrics, None if it is not exported."""
    text = httpx.get(f"{gateway.url}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def admin_state(gateway: Proc) -> dict[str, Any]:
    state: dict[str, Any] = httpx.get(f"{gateway.url}/admin/state", timeout=5).json()
    return state


def every_backend_full(gateway: Proc) -> bool:
    backends = admin_state(gateway)["backends"]
    return all(b["in_rotation"] and b["inflight"] == b["limit"] == LIMIT for b in backends)


def named(alerts: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [a for a in alerts if a["labels"]["alertname"] == name]


def notification(name: str, status: str, instance: str) -> Callable[[dict[str, Any]], bool]:
    """Matches an Alertmanager webhook payload that carries alert `name` for `instance` in `status`."""

    def match(payload: dict[str, Any]) -> bool:
        return any(
            a["status"] == status
            and a["labels"]["alertname"] == name
            and a["labels"].get("instance") == instance
            for a in payload["alerts"]
        )

    return match


def test_overload_fires_capacity_exhausted_and_it_resolves_when_the_load_stops(stack: Stack) -> None:
    gw, prom, hook = stack.main, stack.prom, stack.hook
    instance = host_port(gw.url)
    exhausted = f'gateway_capacity_exhausted{{job="llm-gateway",instance="{instance}"}}'

    # Light load first: one request served at once, the model's gauge scraped as 0, no alert.
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8
    )
    assert reply.choices[0].message.content
    wait_until(lambda: prom.query(f"{exhausted} == 0"), 20, "the idle gauge scraped")
    assert not named(prom.alerts(), "GatewayCapacityExhausted")

    with Overload(gw.url, MODEL, workers=20, max_tokens=100, max_seconds=90) as load:
        wait_until(
            lambda: gateway_gauge(gw, "gateway_capacity_exhausted", model=MODEL) == 1,
            20,
            "gateway_capacity_exhausted == 1 on the gateway's /metrics",
        )
        # What the gauge stands for: every backend at its limit, requests waiting in the queue.
        wait_until(lambda: every_backend_full(gw), 20, "every backend at its limit")
        assert admin_state(gw)["models"][MODEL]["depth"] > 0

        firing = prom.wait_for_alert("GatewayCapacityExhausted", "firing", timeout=45)
        assert firing is not None
        assert firing["labels"]["instance"] == instance
        assert firing["labels"]["model"] == MODEL
        assert firing["labels"]["severity"] == "warning"
        depth = re.search(r"Queue depth now: (\d+)", firing["annotations"]["description"])
        assert depth is not None, firing["annotations"]["description"]
        assert int(depth.group(1)) > 0
        # Only the overloaded gateway is out of capacity.
        alerting = named(prom.alerts(), "GatewayCapacityExhausted")
        assert {a["labels"]["instance"] for a in alerting} == {instance}

        note = hook.wait_for(notification("GatewayCapacityExhausted", "firing", instance), 30)
        (sent,) = named(note["alerts"], "GatewayCapacityExhausted")
        assert sent["labels"]["model"] == MODEL
        assert sent["annotations"]["runbook_url"].endswith("#gatewaycapacityexhausted")

    # Every request was served, late but served: capacity exhaustion queues, it does not reject.
    assert load.completed > 0
    assert not load.errors, load.errors[:5]

    # The clients are gone: their queued requests leave the queue and the gauge drops.
    wait_until(
        lambda: (
            gateway_gauge(gw, "gateway_capacity_exhausted", model=MODEL) == 0
            and admin_state(gw)["models"][MODEL]["depth"] == 0
        ),
        20,
        "an empty queue and gateway_capacity_exhausted back to 0 after the load stopped",
    )
    prom.wait_for_alert("GatewayCapacityExhausted", None, timeout=30)
    hook.wait_for(notification("GatewayCapacityExhausted", "resolved", instance), 30)


def test_a_stopped_gateway_fires_gateway_down(stack: Stack) -> None:
    prom, hook = stack.prom, stack.hook
    instance = host_port(stack.spare.url)
    up = f'up{{job="llm-gateway",instance="{instance}"}}'
    assert [s["value"][1] for s in prom.query(up)] == ["1"]
    assert not named(prom.alerts(), "GatewayDown")

    stack.spare.stop()
    wait_until(lambda: prom.query(f"{up} == 0"), 20, "the failed scrape recorded as up == 0")
    alert = prom.wait_for_alert("GatewayDown", "firing", timeout=30)
    assert alert is not None
    assert alert["labels"]["severity"] == "critical"
    assert alert["labels"]["instance"] == instance
    assert "1 of 2" in alert["annotations"]["description"]
    # The other gateway is still up and not reported.
    assert [a["labels"]["instance"] for a in named(prom.alerts(), "GatewayDown")] == [instance]

    note = hook.wait_for(notification("GatewayDown", "firing", instance), 30)
    (sent,) = named(note["alerts"], "GatewayDown")
    assert sent["annotations"]["runbook_url"].endswith("#gatewaydown")
