"""Loading the deployment files under deploy/ for the tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.procs import ROOT

DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def resources() -> dict[tuple[str, str], dict[str, Any]]:
    """Every Kubernetes resource under deploy/kubernetes, by (kind, name)."""
    out = {}
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for doc in documents(path):
            out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out
