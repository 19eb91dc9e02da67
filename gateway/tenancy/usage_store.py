"""Usage kept across restarts: tokens and requests per minute, tenant and model, in SQLite.

One row per (minute, tenant, model), so the file grows with the minutes that saw traffic times the
tenants and models that sent it, not with requests: a year of one busy tenant on one model is about
half a million rows. Writes add to a row (`ON CONFLICT ... DO UPDATE`), so several processes may
share one file; SQLite serialises their transactions (`busy_timeout` lets a writer wait for
another). Every call here blocks: callers run it off the event loop (gateway.tenancy.usage), in
worker threads, so one lock keeps one transaction at a time on the connection.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "usage.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    minute INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    model TEXT NOT NULL,
    requests INTEGER NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    PRIMARY KEY (minute, tenant, model)
) WITHOUT ROWID
"""

_UPSERT = """
INSERT INTO usage (minute, tenant, model, requests, prompt_tokens, output_tokens)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (minute, tenant, model) DO UPDATE SET
    requests = requests + excluded.requests,
    prompt_tokens = prompt_tokens + excluded.prompt_tokens,
    output_tokens = output_tokens + excluded.output_tokens
"""


@dataclass(frozen=True, slots=True)
class UsageRow:
    minute: int
    """Unix time of the minute's start, in minutes (seconds // 60)."""
    tenant: str
    model: str
    requests: int
    prompt_tokens: int
    output_tokens: int


class UsageStore:
    def __init__(self, data_dir: Path | None) -> None:
        """A store in `data_dir/usage.sqlite3`, or in memory (lost at exit) without a directory."""
        self.persistent = data_dir is not None
        if data_dir is not None:
            data_dir.mkdir(parents=True, exist_ok=True)
        target = str(data_dir / FILE_NAME) if data_dir is not None else ":memory:"
        self._db = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA busy_timeout = 5000")
        if self.persistent:
            self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute(_SCHEMA)
        self._lock = threading.Lock()

    def add(self, rows: Iterable[UsageRow]) -> None:
        values = [(r.minute, r.tenant, r.model, r.requests, r.prompt_tokens, r.output_tokens) for r in rows]
        if not values:
            return
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(_UPSERT, values)

    def totals(self, start_minute: int, end_minute: int) -> list[UsageRow]:
        """Sums per tenant and model over the minutes in [start_minute, end_minute)."""
        with self._lock:
            cur = self._db.execute(
                "SELECT MIN(minute), tenant, model, SUM(requests), SUM(prompt_tokens), SUM(output_tokens) "
                "FROM usage WHERE minute >= ? AND minute < ? GROUP BY tenant, model ORDER BY tenant, model",
                (start_minute, end_minute),
            )
            return [UsageRow(*row) for row in cur.fetchall()]

    def prune(self, before_minute: int) -> None:
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM usage WHERE minute < ?", (before_minute,))

    def close(self) -> None:
        with self._lock:
            self._db.close()
