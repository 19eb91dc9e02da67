"""The Files and Batches objects: their records, their OpenAI JSON shape, and the status rules.

Status transitions, as OpenAI documents them for the Batch API:

    validating -> failed                      (the input file does not validate; nothing runs)
    validating -> in_progress -> finalizing -> completed
    in_progress -> expired                    (the completion window passed)
    validating | in_progress -> cancelling -> cancelled

Request counts: `completed` lines answered 2xx, `failed` lines answered otherwise or given up on;
lines a cancelled or expired batch never ran count in neither (they go to the error file with
`batch_cancelled` or `batch_expired`). Timestamps are Unix seconds, as in OpenAI's objects.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]
STATUSES: tuple[BatchStatus, ...] = (
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
)
TERMINAL: frozenset[str] = frozenset({"failed", "completed", "expired", "cancelled"})
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
"""Batch endpoints the gateway serves (those vLLM serves)."""

TIMESTAMPS = (
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


def new_id(prefix: str) -> str:
    """OpenAI-style identifiers: `file-...`, `batch_...`, `batch_req_...`."""
    return prefix + os.urandom(12).hex()


@dataclass(slots=True)
class FileRecord:
    id: str
    tenant: str
    purpose: str
    filename: str
    bytes: int
    created_at: int
    expires_at: int | None = None

    def to_openai(self) -> dict[str, object]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": self.expires_at,
            "status_details": None,
        }


@dataclass(slots=True)
class BatchRecord:
    id: str
    tenant: str
    endpoint: str
    input_file_id: str
    completion_window: str
    created_at: int
    expires_at: int
    status: BatchStatus = "validating"
    model: str | None = None
    metadata: dict[str, str] | None = None
    errors: list[dict[str, object]] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    times: dict[str, int] = field(default_factory=dict)
    """The `*_at` timestamps of the transitions made so far."""
    total: int = 0
    completed: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def active(self) -> bool:
        return self.status not in TERMINAL

    def to_openai(self) -> dict[str, object]:
        out: dict[str, object] = {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model,
            "errors": None if self.errors is None else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
        }
        out.update({name: self.times.get(name) for name in TIMESTAMPS})
        out["request_counts"] = {"total": self.total, "completed": self.completed, "failed": self.failed}
        out["usage"] = {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.input_tokens + self.output_tokens,
        }
        out["metadata"] = self.metadata
        return out


MAX_WINDOW = 30 * 24 * 3600
"""Longest completion window, in seconds: 30 days, the longest expiry OpenAI gives a file."""


def parse_window(text: str) -> int | None:
    """Seconds in a completion window: OpenAI's `24h`, or any `<n>h`, `<n>m`, `<n>s` of ASCII digits
    up to MAX_WINDOW; None for anything else."""
    unit = {"h": 3600, "m": 60, "s": 1}.get(text[-1:])
    digits = text[:-1]
    if unit is None or not (0 < len(digits) <= 7 and digits.isascii() and digits.isdigit()):
        return None
    seconds = int(digits) * unit
    return seconds if 0 < seconds <= MAX_WINDOW else None
