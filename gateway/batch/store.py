"""The batch state in SQLite: the schema, one connection, and transactions run off the event loop.

Why the standard library's `sqlite3` in one worker thread (rather than `aiosqlite`): aiosqlite is
the same module behind a thread, hopping to it once per statement; here a whole transaction (a
validation pass inserting 50,000 lines, or a group of answered lines and their batch's counters) is
one function run in the thread, one hop, and no dependency. One thread also serialises every
write, which is what SQLite wants of a single writer.

Durability: WAL journal with `synchronous=FULL`, so a commit survives the process being killed and
the machine losing power. Each answered line is committed with its answer (`lines.result`); the
runner groups the answers that arrived while the previous commit ran into one transaction, so the
cost of a commit is shared when answers come quickly and nothing waits when they come slowly.

Tables: `files` (uploads and batch outputs; their bytes are files in `data_dir/files/`),
`batches` (one row per batch: status, timestamps, counters) and `lines` (one row per request of a
batch that is not finished: where it is in the input file, its state, its answer once it has one).
A finished batch's lines are deleted in the transaction that records its output files.

One process per database: `open` takes an exclusive lock on `<database>.lock` (flock, released by
the kernel when the process dies, so a SIGKILL leaves no stale lock) and fails with `StoreInUse` when
another process holds it. Every process resumes the unfinished batches it finds at start, so two on
one directory would run each remaining line once per process.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    purpose TEXT NOT NULL,
    filename TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER
);
CREATE INDEX IF NOT EXISTS files_by_tenant ON files (tenant, seq);
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    status TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    input_file_id TEXT NOT NULL,
    completion_window TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    model TEXT,
    metadata TEXT,
    errors TEXT,
    output_file_id TEXT,
    error_file_id TEXT,
    times TEXT NOT NULL DEFAULT '{}',
    total INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS batches_by_tenant ON batches (tenant, seq);
CREATE INDEX IF NOT EXISTS batches_by_status ON batches (status);
CREATE TABLE IF NOT EXISTS lines (
    batch_id TEXT NOT NULL,
    line INTEGER NOT NULL,
    custom_id TEXT NOT NULL,
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL,
    state INTEGER NOT NULL DEFAULT 0,
    result BLOB,
    PRIMARY KEY (batch_id, line)
) WITHOUT ROWID;
"""

PENDING, COMPLETED, FAILED = 0, 1, 2
"""`lines.state`: not answered yet, answered 2xx, answered otherwise (or given up on)."""


class StoreInUse(RuntimeError):
    """Another process holds the database's lock."""


class Store:
    """The database at `path`; every call runs in the store's one worker thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch-store")
        self._conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None

    async def open(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._connect)

    async def close(self) -> None:
        if self._conn is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._conn.close)
            self._conn = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None
        self._executor.shutdown(wait=True)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(connection, *args)` in the store's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._call, fn, args)

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self._conn is None:
            raise RuntimeError("Store.open() was not awaited")
        return fn(self._conn, *args)

    def _connect(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock()
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.executescript(SCHEMA)
        self._conn = conn

    def _lock(self) -> None:
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreInUse(
                f"{self.path} is in use by another gateway process: batches run in one process "
                "per batch.data_dir"
            ) from None
        self._lock_fd = fd


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK when the body raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
