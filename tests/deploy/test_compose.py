"""deploy/docker-compose.yml: its structure (no Docker needed): services that exist, files that
exist, commands the CLI accepts, a config that validates, and replicas that share one Redis."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from gateway.cli import build_parser
from gateway.config import load_config
from tests.alerts.prom import tool
from tests.deploy.manifests import DEPLOY
from tests.procs import ROOT

COMPOSE = DEPLOY / "docker-compose.yml"


def services() -> dict[str, dict[str, object]]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert set(doc) <= {"name", "services", "x-image", "volumes", "networks"}
    return dict(doc["services"])


def test_builds_and_mounts_point_at_files_that_exist() -> None:
    for name, service in services().items():
        build = service.get("build")
        if isinstance(build, dict):
            context = (COMPOSE.parent / build["context"]).resolve()
            assert (context / build["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):  # type: ignore[attr-defined]
            source = str(volume).split(":", 1)[0]
            assert (COMPOSE.parent / source).exists(), f"{name}: {source}"


def test_depends_on_names_services_and_every_command_parses() -> None:
    found = services()
    parser = build_parser()
    for name, service in found.items():
        for dependency in service.get("depends_on", {}):  # type: ignore[attr-defined]
            assert dependency in found, f"{name} depends on unknown {dependency}"
        command = service.get("command")
        if "build" in service:  # the project's image: its command is the CLI's
            assert isinstance(command, list)
            parser.parse_args([str(c) for c in command])


def test_gateway_replicas_and_workers_share_one_redis_in_front_of_the_simulators() -> None:
    found = services()
    gateway = found["gateway"]
    config = load_config(COMPOSE.parent / "compose" / "gateway.yaml")
    args = build_parser().parse_args([str(c) for c in gateway["command"]])  # type: ignore[attr-defined]
    assert args.workers > 1 and config.state.redis_url is not None
    assert urlsplit(config.state.redis_url).hostname in found
    replicas = gateway["deploy"]["replicas"]  # type: ignore[index]
    assert replicas >= 2
    (ports,) = gateway["ports"]  # type: ignore[misc]
    published, container = str(ports).split(":")
    first, last = (int(p) for p in published.split("-"))
    assert last - first + 1 == replicas and int(container) == config.port
    for backend in config.backends:
        host = urlsplit(backend.url)
        sim = build_parser().parse_args([str(c) for c in found[str(host.hostname)]["command"]])  # type: ignore[attr-defined]
        assert sim.port == host.port
    assert config.host == "0.0.0.0"
    grace = str(gateway["stop_grace_period"]).removesuffix("s")
    assert float(grace) > config.shutdown_grace


def mounts(service: dict[str, object]) -> dict[str, Path]:
    """Container path to the file or folder in this repository that is mounted there."""
    out = {}
    for volume in service.get("volumes", []):  # type: ignore[attr-defined]
        source, target = str(volume).split(":")[:2]
        out[target] = (COMPOSE.parent / source).resolve()
    return out


def test_the_monitoring_profile_scrapes_every_gateway_and_backend_and_loads_the_alerts(
    tmp_path: Path,
) -> None:
    found = services()
    prometheus = found["prometheus"]
    assert prometheus["profiles"] == ["monitoring"] and found["grafana"]["profiles"] == ["monitoring"]
    assert "profiles" not in found["gateway"]  # the plain `up` is unchanged
    files = mounts(prometheus)
    config = yaml.safe_load(files["/etc/prometheus/prometheus.yml"].read_text())
    assert (
        config["rule_files"] == ["alerts.yml"]
        and files["/etc/prometheus/alerts.yml"] == ROOT / "config/alerts.yml"
    )
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    (dns,) = jobs["llm-gateway"]["dns_sd_configs"]
    gateway_config = load_config(COMPOSE.parent / "compose" / "gateway.yaml")
    assert dns["names"] == ["gateway"] and dns["port"] == gateway_config.port
    targets = jobs["vllm"]["static_configs"][0]["targets"]
    assert sorted(targets) == sorted(urlsplit(b.url).netloc for b in gateway_config.backends)
    # promtool reads the file as Prometheus will, with the rules beside it.
    (tmp_path / "prometheus.yml").write_text(files["/etc/prometheus/prometheus.yml"].read_text())
    (tmp_path / "alerts.yml").write_text(files["/etc/prometheus/alerts.yml"].read_text())
    result = subprocess.run(
        [str(tool("promtool")), "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_grafana_gets_the_compose_prometheus_and_the_dashboard_where_its_provider_looks() -> None:
    grafana = services()["grafana"]
    files = mounts(grafana)
    (source,) = yaml.safe_load(
        (files["/etc/grafana/provisioning/datasources"] / "prometheus.yml").read_text()
    )["datasources"]
    dashboard = json.loads(files["/etc/grafana/llm-gateway.json"].read_text())
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p.get("targets", [])}
    assert uids == {"${datasource}"} and source["uid"] == "prometheus"
    assert urlsplit(source["url"]).hostname == "prometheus"
    providers = yaml.safe_load(
        (files["/etc/grafana/provisioning/dashboards"] / "llm-gateway.yml").read_text()
    )
    (provider,) = providers["providers"]
    # Grafana's image sets GF_PATHS_PROVISIONING=/etc/grafana/provisioning.
    path = provider["options"]["path"].replace("${GF_PATHS_PROVISIONING}", "/etc/grafana/provisioning")
    assert str(Path(path).resolve()) == "/etc/grafana" and "/etc/grafana/llm-gateway.json" in files


def test_docker_compose_accepts_the_file_with_the_monitoring_profile(tmp_path: Path) -> None:
    """Compose's own schema check where it is installed (Debian's docker-compose predates the top-level
    `name`, so it reads a copy without it, with the paths resolved from deploy/)."""
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.skip("docker-compose is not installed (Debian: apt-get install docker-compose)")
    copy = tmp_path / "docker-compose.yml"
    copy.write_text(
        "".join(line for line in COMPOSE.read_text().splitlines(True) if not line.startswith("name:"))
    )
    base = [compose, "-f", str(copy), "--project-directory", str(COMPOSE.parent)]
    result = subprocess.run(
        [*base, "--profile", "monitoring", "config", "--services"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert set(result.stdout.split()) == set(services())
