"""The lines of a batch in a real SQLite store: load, pending pages, exactly-once answers, outputs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import orjson
import pytest

from gateway.batch import lines, records
from gateway.batch.lines import LineResult
from gateway.batch.model import BatchRecord, FileRecord
from gateway.batch.output import BATCH_CANCELLED, answer_line
from gateway.batch.store import Store
from gateway.batch.validation import Validation
from tests.batch.jsonl import CHAT, chat_line, jsonl


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(tmp_path / "db" / "batches.sqlite3")
    await s.open()
    yield s
    await s.close()


def to_in_progress(current: BatchRecord, v: Validation) -> Mapping[str, object]:
    if not v.ok:
        return records.status_changes(current, "failed", 2, {"errors": v.errors})
    return records.status_changes(current, "in_progress", 2, {"total": v.lines, "model": v.model})


async def new_batch(store: Store, tmp_path: Path, data: bytes, batch_id: str = "batch_1") -> Path:
    path = tmp_path / f"{batch_id}.jsonl"
    path.write_bytes(data)
    await store.run(records.insert_file, FileRecord("file-in", "t", "batch", "in.jsonl", len(data), 1))
    b = BatchRecord(batch_id, "t", CHAT, "file-in", "24h", created_at=1, expires_at=86401)
    assert await store.run(records.insert_batch, b)
    await store.run(lines.load_lines, batch_id, path, CHAT, 1000, to_in_progress)
    return path


def result(batch_id: str, line: int, ok: bool = True) -> LineResult:
    body = orjson.dumps({"usage": {"prompt_tokens": 5, "completion_tokens": 2}, "n": line})
    text, prompt, completion = answer_line(f"c{line}", 200 if ok else 400, f"r{line}", body)
    return LineResult(batch_id, line, ok, text, prompt, completion)


async def test_a_valid_file_is_loaded_and_the_batch_goes_in_progress(store: Store, tmp_path: Path) -> None:
    path = await new_batch(store, tmp_path, jsonl(*(chat_line(f"c{i}") for i in range(1, 6))))
    b = await store.run(records.get_batch, "t", "batch_1")
    assert b is not None and b.status == "in_progress" and b.total == 5 and b.model == "tiny-llama"
    assert b.times == {"in_progress_at": 2}
    first = await store.run(lines.pending_lines, "batch_1", path, 0, 2)
    assert [(p.line, p.custom_id) for p in first] == [(1, "c1"), (2, "c2")]
    assert orjson.loads(first[0].raw)["custom_id"] == "c1"
    rest = await store.run(lines.pending_lines, "batch_1", path, 2, 10)
    assert [p.line for p in rest] == [3, 4, 5]


async def test_an_invalid_file_leaves_no_lines_and_fails_the_batch(store: Store, tmp_path: Path) -> None:
    path = await new_batch(store, tmp_path, jsonl(chat_line("a"), chat_line("a")))
    b = await store.run(records.get_batch, "t", "batch_1")
    assert b is not None and b.status == "failed" and b.errors is not None
    assert b.errors[0]["code"] == "duplicate_custom_id"
    assert await store.run(lines.pending_lines, "batch_1", path, 0, 10) == []


async def test_an_answer_is_committed_once_with_its_counters(store: Store, tmp_path: Path) -> None:
    path = await new_batch(store, tmp_path, jsonl(*(chat_line(f"c{i}") for i in range(1, 4))))
    assert await store.run(lines.record_results, [result("batch_1", 1), result("batch_1", 2, ok=False)]) == 2
    assert await store.run(lines.record_results, [result("batch_1", 1)]) == 0  # answered already
    b = await store.run(records.get_batch, "t", "batch_1")
    assert b is not None and (b.completed, b.failed, b.input_tokens, b.output_tokens) == (1, 1, 10, 4)
    pending = await store.run(lines.pending_lines, "batch_1", path, 0, 10)
    assert [p.line for p in pending] == [3]


async def test_outputs_hold_each_line_once_in_input_order(store: Store, tmp_path: Path) -> None:
    await new_batch(store, tmp_path, jsonl(*(chat_line(f"c{i}") for i in range(1, 5))))
    await store.run(
        lines.record_results, [result("batch_1", 3), result("batch_1", 1), result("batch_1", 2, False)]
    )
    out, err = tmp_path / "out", tmp_path / "err"
    sizes = await store.run(lines.write_outputs, "batch_1", out, err, BATCH_CANCELLED)
    assert sizes == (out.stat().st_size, err.stat().st_size)
    assert [orjson.loads(line)["custom_id"] for line in out.read_bytes().splitlines()] == ["c1", "c3"]
    errors = [orjson.loads(line) for line in err.read_bytes().splitlines()]
    assert [e["custom_id"] for e in errors] == ["c2", "c4"]
    assert errors[0]["response"]["status_code"] == 400 and errors[1]["error"]["code"] == "batch_cancelled"
    b = await store.run(records.get_batch, "t", "batch_1")
    assert b is not None
    files = [FileRecord("file-out", "t", "batch_output", "o.jsonl", sizes[0], 3)]
    changes = records.status_changes(b, "cancelled", 3, {"output_file_id": "file-out"})
    await store.run(lines.finish, "batch_1", files, changes)
    done = await store.run(records.get_batch, "t", "batch_1")
    assert done is not None and done.status == "cancelled" and done.output_file_id == "file-out"
    assert await store.run(lines.pending_count, "batch_1") == 0
    assert await store.run(records.get_file, "t", "file-out") is not None


async def test_an_output_file_with_no_line_is_not_left_on_disk(store: Store, tmp_path: Path) -> None:
    await new_batch(store, tmp_path, jsonl(chat_line("c1")))
    await store.run(lines.record_results, [result("batch_1", 1)])
    out, err = tmp_path / "out", tmp_path / "err"
    assert (await store.run(lines.write_outputs, "batch_1", out, err, None))[1] == 0
    assert out.exists() and not err.exists()


async def test_transitions_are_compare_and_set(store: Store, tmp_path: Path) -> None:
    await new_batch(store, tmp_path, jsonl(chat_line("c1")))
    moved = await store.run(records.transition, "batch_1", "cancelling", 5, ("validating", "in_progress"))
    assert moved is not None and moved[0] == "in_progress" and moved[1].status == "cancelling"
    assert moved[1].times == {"in_progress_at": 2, "cancelling_at": 5}
    assert await store.run(records.transition, "batch_1", "finalizing", 6, ("in_progress",)) is None


async def test_tenants_see_only_their_own_and_lists_page(store: Store, tmp_path: Path) -> None:
    for i in range(5):
        await store.run(records.insert_file, FileRecord(f"f{i}", "t", "batch", "x.jsonl", 1, i))
    await store.run(records.insert_file, FileRecord("other", "u", "batch", "x.jsonl", 1, 9))
    page, more = await store.run(records.list_files, "t", None, None, 2, False)
    assert [f.id for f in page] == ["f4", "f3"] and more
    page, more = await store.run(records.list_files, "t", None, "f3", 10, False)
    assert [f.id for f in page] == ["f2", "f1", "f0"] and not more
    assert await store.run(records.get_file, "t", "other") is None
    assert await store.run(records.get_file, "u", "other") is not None


async def test_a_file_an_unfinished_batch_reads_is_not_deleted(store: Store, tmp_path: Path) -> None:
    await new_batch(store, tmp_path, jsonl(chat_line("c1")))
    assert await store.run(records.delete_unused_file, "file-in") == ["batch_1"]
    assert await store.run(records.get_file, "t", "file-in") is not None
