"""Rows of `files` and `batches`: insert, read, list a page, update. Run in the store's thread.

Lists are newest first by insertion order (`seq`); `after` is the id of the last object of the
previous page, as the OpenAI SDK's cursor pages send it. A tenant only ever sees its own rows: every
read takes the tenant and matches it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.batch.model import BatchRecord, FileRecord
from gateway.batch.store import transaction

_FILE_COLUMNS = "id, tenant, purpose, filename, bytes, created_at, expires_at"
_BATCH_COLUMNS = (
    "id, tenant, endpoint, input_file_id, completion_window, created_at, expires_at, status, model, "
    "metadata, errors, output_file_id, error_file_id, times, total, completed, failed, "
    "input_tokens, output_tokens"
)
_JSON_FIELDS = frozenset({"metadata", "errors", "times"})


def insert_file(conn: sqlite3.Connection, record: FileRecord) -> None:
    with transaction(conn):
        insert_file_in(conn, record)


def insert_file_in(conn: sqlite3.Connection, r: FileRecord) -> None:
    conn.execute(
        f"INSERT INTO files ({_FILE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (r.id, r.tenant, r.purpose, r.filename, r.bytes, r.created_at, r.expires_at),
    )


def get_file(conn: sqlite3.Connection, tenant: str | None, file_id: str) -> FileRecord | None:
    """The file, if it exists and (unless `tenant` is None) belongs to `tenant`."""
    row = conn.execute(f"SELECT {_FILE_COLUMNS} FROM files WHERE id = ?", (file_id,)).fetchone()
    if row is None or (tenant is not None and row[1] != tenant):
        return None
    return FileRecord(*row)


def list_files(
    conn: sqlite3.Connection, tenant: str, purpose: str | None, after: str | None, limit: int, ascending: bool
) -> tuple[list[FileRecord], bool]:
    sql = f"SELECT {_FILE_COLUMNS} FROM files WHERE tenant = ?"
    args: list[Any] = [tenant]
    if purpose is not None:
        sql += " AND purpose = ?"
        args.append(purpose)
    rows = _page(conn, "files", sql, args, after, limit, ascending)
    return [FileRecord(*row) for row in rows[:limit]], len(rows) > limit


def delete_unused_file(conn: sqlite3.Connection, file_id: str) -> list[str]:
    """Delete the file's row unless an unfinished batch reads it; returns those batches."""
    with transaction(conn):
        users = batches_using(conn, file_id)
        if not users:
            conn.execute("DELETE FROM files WHERE id = ?", (file_id,))
    return users


def expired_files(conn: sqlite3.Connection, now: int) -> list[str]:
    rows = conn.execute("SELECT id FROM files WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))
    return [row[0] for row in rows]


def file_ids(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT id FROM files")}


def batches_using(conn: sqlite3.Connection, file_id: str) -> list[str]:
    """Unfinished batches reading `file_id`."""
    rows = conn.execute(
        "SELECT id FROM batches WHERE input_file_id = ? AND status NOT IN "
        "('failed', 'completed', 'expired', 'cancelled')",
        (file_id,),
    )
    return [row[0] for row in rows]


def insert_batch(conn: sqlite3.Connection, b: BatchRecord) -> bool:
    """Insert the batch unless its input file is gone (deleted since it was looked up)."""
    values = _batch_values(b)
    with transaction(conn):
        if get_file(conn, b.tenant, b.input_file_id) is None:
            return False
        conn.execute(
            f"INSERT INTO batches ({_BATCH_COLUMNS}) VALUES ({', '.join('?' * len(values))})", values
        )
    return True


def get_batch(conn: sqlite3.Connection, tenant: str | None, batch_id: str) -> BatchRecord | None:
    row = conn.execute(f"SELECT {_BATCH_COLUMNS} FROM batches WHERE id = ?", (batch_id,)).fetchone()
    if row is None or (tenant is not None and row[1] != tenant):
        return None
    return _batch(row)


def list_batches(
    conn: sqlite3.Connection, tenant: str, after: str | None, limit: int
) -> tuple[list[BatchRecord], bool]:
    sql = f"SELECT {_BATCH_COLUMNS} FROM batches WHERE tenant = ?"
    rows = _page(conn, "batches", sql, [tenant], after, limit, ascending=False)
    return [_batch(row) for row in rows[:limit]], len(rows) > limit


def unfinished_batches(conn: sqlite3.Connection) -> list[BatchRecord]:
    rows = conn.execute(
        f"SELECT {_BATCH_COLUMNS} FROM batches WHERE status NOT IN "
        "('failed', 'completed', 'expired', 'cancelled') ORDER BY seq"
    )
    return [_batch(row) for row in rows]


def status_counts(conn: sqlite3.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT status, count(*) FROM batches GROUP BY status").fetchall())


def update_batch(conn: sqlite3.Connection, batch_id: str, changes: Mapping[str, object]) -> None:
    """Set the given columns of one batch (JSON-encoding `metadata`, `errors`, `times`)."""
    with transaction(conn):
        update_batch_in(conn, batch_id, changes)


def update_batch_in(conn: sqlite3.Connection, batch_id: str, changes: Mapping[str, object]) -> None:
    """`update_batch` inside the caller's transaction."""
    names = list(changes)
    values = [orjson.dumps(changes[n]).decode() if n in _JSON_FIELDS else changes[n] for n in names]
    sets = ", ".join(f"{n} = ?" for n in names)
    conn.execute(f"UPDATE batches SET {sets} WHERE id = ?", (*values, batch_id))


def transition(
    conn: sqlite3.Connection,
    batch_id: str,
    status: str,
    now: int,
    expect: tuple[str, ...],
    extra: Mapping[str, object] | None = None,
) -> tuple[str, BatchRecord] | None:
    """Move a batch to `status` (stamping `<status>_at`) if its status is one of `expect`; returns
    (old status, the batch as it now is), or None when it was in another status."""
    with transaction(conn):
        b = get_batch(conn, None, batch_id)
        if b is None or b.status not in expect:
            return None
        old = b.status
        changes = status_changes(b, status, now, extra)
        update_batch_in(conn, batch_id, changes)
    for name, value in changes.items():
        setattr(b, name, value)
    return old, b


def status_changes(
    b: BatchRecord, status: str, now: int, extra: Mapping[str, object] | None = None
) -> dict[str, object]:
    """The columns that move `b` to `status` at `now`."""
    return {"status": status, "times": {**b.times, f"{status}_at": now}, **(extra or {})}


def _page(
    conn: sqlite3.Connection,
    table: str,
    sql: str,
    args: list[Any],
    after: str | None,
    limit: int,
    ascending: bool,
) -> list[tuple[Any, ...]]:
    """Rows of `sql` past the cursor, one more than `limit` (to tell whether more follow)."""
    if after is not None:
        row = conn.execute(f"SELECT seq FROM {table} WHERE id = ?", (after,)).fetchone()
        if row is not None:
            sql += " AND seq > ?" if ascending else " AND seq < ?"
            args.append(row[0])
    sql += f" ORDER BY seq {'ASC' if ascending else 'DESC'} LIMIT ?"
    args.append(limit + 1)
    return conn.execute(sql, args).fetchall()


def _batch_values(b: BatchRecord) -> tuple[Any, ...]:
    dumps = orjson.dumps
    return (
        b.id,
        b.tenant,
        b.endpoint,
        b.input_file_id,
        b.completion_window,
        b.created_at,
        b.expires_at,
        b.status,
        b.model,
        None if b.metadata is None else dumps(b.metadata).decode(),
        None if b.errors is None else dumps(b.errors).decode(),
        b.output_file_id,
        b.error_file_id,
        dumps(b.times).decode(),
        b.total,
        b.completed,
        b.failed,
        b.input_tokens,
        b.output_tokens,
    )


def _batch(row: tuple[Any, ...]) -> BatchRecord:
    (bid, tenant, endpoint, input_file, window, created, expires, status, model, meta, errors, out, err) = (
        row[:13]
    )
    return BatchRecord(
        id=bid,
        tenant=tenant,
        endpoint=endpoint,
        input_file_id=input_file,
        completion_window=window,
        created_at=created,
        expires_at=expires,
        status=status,
        model=model,
        metadata=None if meta is None else orjson.loads(meta),
        errors=None if errors is None else orjson.loads(errors),
        output_file_id=out,
        error_file_id=err,
        times=orjson.loads(row[13]),
        total=row[14],
        completed=row[15],
        failed=row[16],
        input_tokens=row[17],
        output_tokens=row[18],
    )
