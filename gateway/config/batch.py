"""The `batch` section of the config: where the Files and Batches API keeps its state, and its limits.

One module a section, like the others: root.py calls `parse_batch` with the shared reader, which
collects every problem with its dotted path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.config.reader import ConfigReader, default

OPENAI_MAX_FILE_BYTES = 200 * 1024 * 1024
"""OpenAI's limit on a batch input file (200 MB)."""
OPENAI_MAX_LINES = 50_000
"""OpenAI's limit on the requests in one batch."""


@dataclass(frozen=True, slots=True)
class BatchConfig:
    data_dir: Path | None = None
    """SQLite database and uploaded files live here; None turns /v1/files and /v1/batches off."""
    max_file_bytes: int = OPENAI_MAX_FILE_BYTES
    max_lines: int = OPENAI_MAX_LINES
    max_attempts: int = 5
    """Tries of one line answered 429 or 5xx (or not reached) before it is written as failed."""
    interactive_horizon: float = 30.0
    """Seconds the peak of interactive requests in flight on a backend is remembered: batch lines
    leave that many of its slots free."""

    @property
    def enabled(self) -> bool:
        return self.data_dir is not None


def parse_batch(r: ConfigReader, data: Mapping[str, Any]) -> BatchConfig:
    raw = r.section(data, "batch", "")
    path = "batch."
    r.unknown(raw, {"data_dir", "max_file_bytes", "max_lines", "max_attempts", "interactive_horizon"}, path)
    data_dir = raw.get("data_dir")
    if data_dir is not None and (not isinstance(data_dir, str) or not data_dir):
        r.problems.append(f"{path}data_dir: must be a directory path, got {data_dir!r}")
        data_dir = None
    return BatchConfig(
        data_dir=None if data_dir is None else Path(data_dir).expanduser(),
        **{
            key: r.number(raw, key, default(BatchConfig, key), path, minimum=1, integer=True)
            for key in ("max_file_bytes", "max_lines", "max_attempts")
        },
        interactive_horizon=r.seconds(
            raw, "interactive_horizon", default(BatchConfig, "interactive_horizon"), path
        ),
    )
