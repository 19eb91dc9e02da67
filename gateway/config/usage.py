"""The `usage` section: where tokens and requests per tenant and model are kept (GET /admin/usage).

The store is a SQLite file, `usage.sqlite3`, in `data_dir` (default: `batch.data_dir`); without
either, usage is kept in memory and lost at a restart. Rows are per minute, tenant and model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.config.reader import ConfigReader, default


@dataclass(frozen=True, slots=True)
class UsageConfig:
    data_dir: Path | None = None
    flush_interval: float = 5.0
    """Seconds between writes of the counted usage to the store."""
    retention_days: float = 400.0
    """Rows older than this are deleted."""


def parse_usage(r: ConfigReader, data: Mapping[str, Any]) -> UsageConfig:
    raw = r.section(data, "usage", "")
    path = "usage."
    r.unknown(raw, {"data_dir", "flush_interval", "retention_days"}, path)
    data_dir = raw.get("data_dir")
    if data_dir is not None and (not isinstance(data_dir, str) or not data_dir):
        r.problems.append(f"{path}data_dir: must be a directory path, got {data_dir!r}")
        data_dir = None
    return UsageConfig(
        data_dir=None if data_dir is None else Path(data_dir).expanduser(),
        flush_interval=r.seconds(raw, "flush_interval", default(UsageConfig, "flush_interval"), path),
        retention_days=float(
            r.number(
                raw,
                "retention_days",
                default(UsageConfig, "retention_days"),
                path,
                exclusive=True,
                maximum=1e5,
            )
        ),
    )
