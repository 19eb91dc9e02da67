"""A config from a YAML file: read, parsed as YAML, and required to be a mapping before parse_config."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gateway.config.errors import ConfigError
from gateway.config.root import GatewayConfig, parse_config


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> GatewayConfig:
    return parse_config(read_mapping(path), env)


def read_mapping(path: str | Path) -> Mapping[str, Any]:
    """The YAML file at `path` as a mapping, or ConfigError saying why it is not one."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML: {exc}"]) from exc
    if not isinstance(data, Mapping):
        raise ConfigError([f"{path}: the top level must be a mapping"])
    return data
