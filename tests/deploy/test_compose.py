"""deploy/docker-compose.yml: its structure (no Docker needed): services that exist, files that
exist, commands the CLI accepts, a config that validates, and replicas that share one Redis."""

from __future__ import annotations

from urllib.parse import urlsplit

import yaml

from gateway.cli import build_parser
from gateway.config import load_config
from tests.deploy.manifests import DEPLOY

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
        if name != "redis":
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
