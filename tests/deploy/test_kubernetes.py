"""deploy/kubernetes: every resource is valid against the Kubernetes API schemas (no cluster), and
the pieces fit together the way the gateway needs."""

from __future__ import annotations

import copy
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from gateway.cli import build_parser
from gateway.config import GatewayConfig, parse_config
from tests.alerts.promql import GAUGES
from tests.deploy.manifests import KUBERNETES, resources

K8S_VERSION = "1.30.0"
"""The oldest version the manifests are checked against (preStop's sleep action needs 1.30)."""


@pytest.mark.parametrize("version", [K8S_VERSION, kubernetes_validate.latest_version()])
def test_every_resource_is_valid_against_the_kubernetes_schemas(version: str) -> None:
    found = resources()
    assert len(found) >= 8
    for (kind, name), doc in found.items():
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{kind}/{name} against {version}: {exc.message}")


def test_the_validator_rejects_a_broken_deployment() -> None:
    broken = copy.deepcopy(resources()[("Deployment", "llm-gateway")])
    broken["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)
    broken = copy.deepcopy(resources()[("Deployment", "llm-gateway")])
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def gateway_config() -> GatewayConfig:
    config_map = resources()[("ConfigMap", "llm-gateway")]
    return parse_config(yaml.safe_load(config_map["data"]["gateway.yaml"]))


def container() -> dict[str, Any]:
    spec = resources()[("Deployment", "llm-gateway")]["spec"]["template"]["spec"]
    (only,) = spec["containers"]
    return dict(only)


def test_deployment_runs_three_replicas_of_the_configured_gateway_that_share_state() -> None:
    found = resources()
    deployment = found[("Deployment", "llm-gateway")]
    assert deployment["spec"]["replicas"] == 3
    config = gateway_config()
    assert config.host == "0.0.0.0"
    assert config.state.redis_url is not None
    redis_host = urlsplit(config.state.redis_url).hostname
    redis_port = urlsplit(config.state.redis_url).port
    service = found[("Service", str(redis_host))]
    assert [p["port"] for p in service["spec"]["ports"]] == [redis_port]
    redis_pods = found[("Deployment", str(redis_host))]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= redis_pods.items()
    args = build_parser().parse_args(container()["args"])
    assert args.command == "serve" and args.config == "/etc/llm-gateway/gateway.yaml"
    mounts = {m["mountPath"] for m in container()["volumeMounts"]}
    assert "/etc/llm-gateway" in mounts
    assert [p["containerPort"] for p in container()["ports"]] == [config.port, config.admin.probe_port]


def test_probes_ask_the_probe_port_and_termination_outlasts_the_drain() -> None:
    spec = resources()[("Deployment", "llm-gateway")]["spec"]["template"]["spec"]
    c = container()
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["livenessProbe"]["httpGet"]["path"] == "/live"  # no backend must not mean restart
    for probe in ("readinessProbe", "livenessProbe"):
        assert ports[c[probe]["httpGet"]["port"]] == gateway_config().admin.probe_port
    pause = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert spec["terminationGracePeriodSeconds"] > gateway_config().shutdown_grace + pause


def test_service_and_disruption_budget_select_the_gateway_pods() -> None:
    found = resources()
    labels = found[("Deployment", "llm-gateway")]["spec"]["template"]["metadata"]["labels"]
    service = found[("Service", "llm-gateway")]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    pdb = found[("PodDisruptionBudget", "llm-gateway")]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1  # of 3: two keep serving during a drain


def test_autoscaler_scales_the_deployment_on_the_queue_depth_the_adapter_exposes() -> None:
    found = resources()
    hpa = found[("HorizontalPodAutoscaler", "llm-gateway")]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm-gateway"}
    assert hpa["minReplicas"] == found[("Deployment", "llm-gateway")]["spec"]["replicas"]
    (metric,) = hpa["metrics"]
    name = metric["pods"]["metric"]["name"]
    assert name == "gateway_queue_depth" and name in GAUGES
    rules = yaml.safe_load(found[("ConfigMap", "llm-gateway-adapter-rules")]["data"]["config.yaml"])["rules"]
    assert [r["name"]["as"] for r in rules] == [name]
    assert rules[0]["seriesQuery"].startswith(f"{name}{{")


def test_manifests_directory_holds_only_yaml() -> None:
    assert {p.suffix for p in KUBERNETES.iterdir()} == {".yaml"}
