"""Where the running config comes from: a file and command-line flags, read again on reload.

`serve --config PATH --max-queue 100` means the file with that flag on top, at start and on every
reload alike, so a reload never silently drops what the command line set. Flags override the file
key by key within a section (`--max-queue` keeps the file's `queue.timeout`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config import GatewayConfig, parse_config, read_mapping


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


class ConfigSource:
    def __init__(self, path: str | None, overrides: Mapping[str, Any]) -> None:
        self.path = path
        self.overrides = dict(overrides)

    def load(self) -> GatewayConfig:
        """The config as it reads now; ConfigError lists every problem."""
        data = read_mapping(self.path) if self.path else {}
        return parse_config(merge(data, self.overrides))
