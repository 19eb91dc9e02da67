"""The `lines` table: load a validated input file, hand out pending lines, record answers, and
write a finished batch's output and error files. Run in the store's thread.

Exactly once: a line's answer and its state change are one statement, applied only while the line
is still pending (`state = 0`), in the same transaction as its batch's counters. A line answered
but not yet committed when the process dies is pending after a restart and runs again; a committed
one never does. The output files are written from the table at the end, so each `custom_id` of an
input file appears exactly once in the output or error file.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.batch.model import BatchRecord, FileRecord
from gateway.batch.output import error_line
from gateway.batch.records import get_batch, insert_file_in, update_batch_in
from gateway.batch.store import COMPLETED, FAILED, PENDING, transaction
from gateway.batch.validation import Validation, validate


@dataclass(frozen=True, slots=True)
class PendingLine:
    line: int
    custom_id: str
    raw: bytes


@dataclass(frozen=True, slots=True)
class LineResult:
    batch_id: str
    line: int
    ok: bool
    """Answered 2xx: the output file; otherwise the error file."""
    result: bytes
    prompt_tokens: int = 0
    completion_tokens: int = 0


def read_lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(1-based line number, byte offset, bytes without the line ending) of every line."""
    offset = 0
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            yield number, offset, raw.rstrip(b"\r\n")
            offset += len(raw)


def load_lines(
    conn: sqlite3.Connection,
    batch_id: str,
    path: Path,
    endpoint: str,
    max_lines: int,
    decide: Callable[[BatchRecord, Validation], Mapping[str, object]],
) -> Mapping[str, object]:
    """Validate the input file into `lines` and set the batch's columns that `decide` returns for
    (the batch as it now is, the validation), in one transaction; the lines stay only if every one
    is valid. Returns those columns."""
    insert = "INSERT INTO lines (batch_id, line, custom_id, offset, length) VALUES (?, ?, ?, ?, ?)"

    def accept(number: int, custom_id: str, offset: int, length: int) -> None:
        conn.execute(insert, (batch_id, number, custom_id, offset, length))

    with transaction(conn):
        conn.execute("DELETE FROM lines WHERE batch_id = ?", (batch_id,))
        result = validate(read_lines(path), endpoint, max_lines, accept)
        if not result.ok:
            conn.execute("DELETE FROM lines WHERE batch_id = ?", (batch_id,))
        current = get_batch(conn, None, batch_id)
        assert current is not None
        changes = decide(current, result)
        update_batch_in(conn, batch_id, changes)
    return changes


def pending_lines(
    conn: sqlite3.Connection, batch_id: str, path: Path, after: int, limit: int
) -> list[PendingLine]:
    """Up to `limit` pending lines numbered above `after`, in order, with their bytes."""
    rows = conn.execute(
        "SELECT line, custom_id, offset, length FROM lines "
        "WHERE batch_id = ? AND line > ? AND state = ? ORDER BY line LIMIT ?",
        (batch_id, after, PENDING, limit),
    ).fetchall()
    if not rows:
        return []
    fd = os.open(path, os.O_RDONLY)
    try:
        return [PendingLine(line, cid, os.pread(fd, length, offset)) for line, cid, offset, length in rows]
    finally:
        os.close(fd)


def record_results(conn: sqlite3.Connection, results: list[LineResult]) -> int:
    """Commit answers (each only if its line is still pending) and their batches' counters."""
    applied = 0
    with transaction(conn):
        for r in results:
            cur = conn.execute(
                "UPDATE lines SET state = ?, result = ? WHERE batch_id = ? AND line = ? AND state = ?",
                (COMPLETED if r.ok else FAILED, r.result, r.batch_id, r.line, PENDING),
            )
            if cur.rowcount != 1:
                continue
            applied += 1
            conn.execute(
                "UPDATE batches SET completed = completed + ?, failed = failed + ?, "
                "input_tokens = input_tokens + ?, output_tokens = output_tokens + ? WHERE id = ?",
                (int(r.ok), int(not r.ok), r.prompt_tokens, r.completion_tokens, r.batch_id),
            )
    return applied


def write_outputs(
    conn: sqlite3.Connection, batch_id: str, output: Path, errors: Path, unrun: tuple[str, str] | None
) -> tuple[int, int]:
    """Write the answered lines to `output` and `errors` in input order, and the pending ones to
    `errors` with the `unrun` (code, message), if given. Returns the byte sizes; a file with no
    line is not left on disk (size 0)."""
    rows = conn.execute(
        "SELECT custom_id, state, result FROM lines WHERE batch_id = ? ORDER BY line", (batch_id,)
    )
    with output.open("wb") as out, errors.open("wb") as err:
        for custom_id, state, result in rows:
            if state == COMPLETED:
                out.write(result)
            elif state == FAILED:
                err.write(result)
            elif unrun is not None:
                err.write(error_line(custom_id, *unrun))
        sizes = (out.tell(), err.tell())
        for f in (out, err):
            f.flush()
            os.fsync(f.fileno())
    for path, size in zip((output, errors), sizes, strict=True):
        if size == 0:
            path.unlink()
    return sizes


def finish(
    conn: sqlite3.Connection, batch_id: str, files: list[FileRecord], changes: Mapping[str, object]
) -> None:
    """Record the output files and the batch's final columns, and forget its lines."""
    with transaction(conn):
        for record in files:
            insert_file_in(conn, record)
        update_batch_in(conn, batch_id, changes)
        conn.execute("DELETE FROM lines WHERE batch_id = ?", (batch_id,))


def pending_count(conn: sqlite3.Connection, batch_id: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM lines WHERE batch_id = ? AND state = ?", (batch_id, PENDING)
    ).fetchone()
    return int(row[0])
