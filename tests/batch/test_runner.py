"""BatchRun against an ASGI handler standing in for the gateway: retries, window, stop, commits."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import orjson
import pytest

from gateway.batch import lines, records
from gateway.batch.lines import LineResult
from gateway.batch.model import BatchRecord, FileRecord
from gateway.batch.runner import BatchRun, ResultWriter
from gateway.batch.store import Store
from gateway.batch.validation import Validation
from gateway.proxy.endpoints import BACKGROUND_TENANT
from gateway.types import Receive, Scope, Send
from tests.batch.jsonl import CHAT, chat_line, jsonl


class Backend:
    """An ASGI app answering by custom_id: `plan[cid]` is the statuses of successive tries."""

    def __init__(self, plan: Mapping[str, list[int]] | None = None, hang: bool = False) -> None:
        self.plan = plan or {}
        self.hang = hang
        self.crowded = asyncio.Event()
        """Set once six requests are in at once."""
        self.tries: Counter[str] = Counter()
        self.concurrent = self.peak = 0
        self.tenants: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = orjson.loads((await receive())["body"])
        cid = body["messages"][0]["content"].split()[-1]
        self.tenants.add(scope[BACKGROUND_TENANT])
        self.tries[cid] += 1
        self.concurrent += 1
        self.peak = max(self.peak, self.concurrent)
        if self.concurrent >= 6:
            self.crowded.set()
        try:
            if self.hang:
                await receive()  # until the run stops: the "client" disconnects
                return
            await asyncio.sleep(0.001)
            statuses = self.plan.get(cid, [200])
            status = statuses[min(self.tries[cid], len(statuses)) - 1]
            payload = (
                {"usage": {"prompt_tokens": 3, "completion_tokens": 1}} if status == 200 else {"error": {}}
            )
            headers = [(b"retry-after-ms", b"5")] if status == 503 else []
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": orjson.dumps(payload)})
        finally:
            self.concurrent -= 1


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(tmp_path / "batches.sqlite3")
    await s.open()
    yield s
    await s.close()


async def start(store: Store, tmp_path: Path, n: int) -> tuple[BatchRecord, Path]:
    path = tmp_path / "in.jsonl"
    path.write_bytes(jsonl(*(chat_line(f"c{i}") for i in range(1, n + 1))))
    await store.run(records.insert_file, FileRecord("file-in", "t", "batch", "in.jsonl", 1, 1))
    b = BatchRecord("batch_1", "t", CHAT, "file-in", "24h", created_at=1, expires_at=9)
    await store.run(records.insert_batch, b)

    def decide(current: BatchRecord, v: Validation) -> Mapping[str, object]:
        return records.status_changes(current, "in_progress", 1, {"total": v.lines, "model": v.model})

    await store.run(lines.load_lines, b.id, path, CHAT, 10_000, decide)
    return b, path


def runner(store: Store, b: BatchRecord, path: Path, app: Backend, committed: list[LineResult]) -> BatchRun:
    writer = ResultWriter(store, committed.extend)
    return BatchRun(
        b, path, store=store, handler=app, capacity=lambda: 4, writer=writer, max_attempts=3, backoff=0.01
    )


async def test_every_line_is_answered_once_within_the_window(store: Store, tmp_path: Path) -> None:
    b, path = await start(store, tmp_path, 40)
    app, committed = Backend(), []
    assert await runner(store, b, path, app, committed).run() == "done"
    assert sorted(r.line for r in committed) == list(range(1, 41))
    assert app.peak <= 4 + 4 // 4 + 2 and app.tenants == {"t"}
    saved = await store.run(records.get_batch, "t", b.id)
    assert saved is not None and (saved.completed, saved.failed, saved.input_tokens) == (40, 0, 120)


async def test_429_and_5xx_are_tried_again_then_written_as_answered(store: Store, tmp_path: Path) -> None:
    b, path = await start(store, tmp_path, 3)
    app, committed = Backend({"c1": [503, 503, 200], "c2": [500], "c3": [400]}), []
    await runner(store, b, path, app, committed).run()
    assert app.tries == {"c1": 3, "c2": 3, "c3": 1}
    by_line = {r.line: r for r in committed}
    assert by_line[1].ok and not by_line[2].ok and not by_line[3].ok
    assert orjson.loads(by_line[2].result)["response"]["status_code"] == 500


async def test_a_stopped_run_leaves_unanswered_lines_pending(store: Store, tmp_path: Path) -> None:
    b, path = await start(store, tmp_path, 10)
    app, committed = Backend(hang=True), []
    run = runner(store, b, path, app, committed)
    task = asyncio.create_task(run.run())
    await asyncio.wait_for(app.crowded.wait(), 10)
    run.stop("cancelled")
    assert await task == "cancelled"
    assert committed == [] and app.concurrent == 0
    assert await store.run(lines.pending_count, b.id) == 10
