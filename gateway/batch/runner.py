"""Runs the pending lines of one batch through the gateway, and commits each answer as it comes.

Lines are read from the store a page at a time (in input order) and started while the number
outstanding (waiting in the queue's background class or in flight) is below a window of
capacity + capacity / 4 + 2, `capacity` being the sum of the limits of the backends serving the
batch's model. The window keeps a few lines waiting, so a slot that frees is taken at once and the
controller sees the batch's demand (waiting lines count as queued: the limit may rise while latency
allows), without parking a whole 50,000-line batch in memory.

A line answered 429 or 5xx (the gateway's own shedding included) or whose answer broke off is tried
again after the gateway's advised wait (`retry-after-ms`) or an exponential backoff from 1 s,
capped at 30 s, up to `max_attempts` tries; then its last answer is written as it is.

Answers are committed by `ResultWriter`, one transaction for all the answers that arrived while the
previous commit ran (group commit). `stop(reason)` ends the run: outstanding lines are abandoned
(they stay pending, to run again after a restart or never if the batch was cancelled or expired),
answers already received are still committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

import orjson

from gateway.batch.inprocess import Answer, Handler, call
from gateway.batch.lines import LineResult, PendingLine, pending_lines, record_results
from gateway.batch.model import BatchRecord
from gateway.batch.output import answer_line, error_line
from gateway.batch.store import Store

log = logging.getLogger("gateway.batch")

PAGE = 256
"""Pending lines read from the store at a time."""
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
BACKOFF_MAX = 30.0


class ResultWriter:
    """Commits answered lines in groups; `on_commit` hears of each group once it is durable."""

    def __init__(self, store: Store, on_commit: Callable[[list[LineResult]], None]) -> None:
        self._store = store
        self._on_commit = on_commit
        self._pending: list[LineResult] = []
        self._task: asyncio.Task[None] | None = None

    def add(self, result: LineResult) -> None:
        self._pending.append(result)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())

    async def flush(self) -> None:
        while self._task is not None and not self._task.done():
            await self._task
        if self._task is not None:
            self._task.result()  # re-raise a failed commit

    async def _drain(self) -> None:
        while self._pending:
            group, self._pending = self._pending, []
            await self._store.run(record_results, group)
            self._on_commit(group)


class BatchRun:
    def __init__(
        self,
        batch: BatchRecord,
        input_path: Path,
        *,
        store: Store,
        handler: Handler,
        capacity: Callable[[], int],
        writer: ResultWriter,
        max_attempts: int,
        backoff: float = 1.0,
    ) -> None:
        self.batch = batch
        self.reason = "done"
        self._input = input_path
        self._store = store
        self._handler = handler
        self._capacity = capacity
        self._writer = writer
        self._max_attempts = max_attempts
        self._backoff = backoff
        self._stop = asyncio.Event()
        self._outstanding: set[asyncio.Task[None]] = set()
        self._room = asyncio.Event()

    def stop(self, reason: str) -> None:
        """End the run for `reason` (cancelled, expired, shutdown); the first reason given stays."""
        if not self._stop.is_set():
            self.reason = reason
            self._stop.set()
            self._room.set()

    async def run(self) -> str:
        """Run every pending line; returns "done", or the reason the run was stopped."""
        after = 0
        try:
            while not self._stop.is_set():
                page = await self._store.run(pending_lines, self.batch.id, self._input, after, PAGE)
                if not page:
                    break
                for line in page:
                    await self._wait_for_room()
                    if self._stop.is_set():
                        break
                    task = asyncio.create_task(self._line(line))
                    self._outstanding.add(task)
                    task.add_done_callback(self._done)
                after = page[-1].line
            while self._outstanding:
                await asyncio.wait(set(self._outstanding))
        finally:
            self.stop(self.reason)
            if self._outstanding:
                await asyncio.wait(set(self._outstanding))
            await self._writer.flush()
        return self.reason

    def _window(self) -> int:
        capacity = self._capacity()
        return capacity + capacity // 4 + 2

    async def _wait_for_room(self) -> None:
        while len(self._outstanding) >= self._window() and not self._stop.is_set():
            self._room.clear()
            await self._room.wait()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._outstanding.discard(task)
        self._room.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("batch %s: a line failed: %r", self.batch.id, task.exception())

    async def _line(self, line: PendingLine) -> None:
        batch = self.batch
        body = orjson.dumps(orjson.loads(line.raw)["body"])
        request_id = f"{batch.id}-{line.line}"
        answer, broken = Answer(0, b""), False
        for attempt in range(1, self._max_attempts + 1):
            answer = await call(self._handler, batch.endpoint, body, batch.tenant, request_id, self._stop)
            if answer.status == 0:
                return  # stopped: the line stays pending
            broken = 200 <= answer.status < 300 and not _is_json(answer.body)
            if not (broken or answer.status in RETRY_STATUSES) or attempt == self._max_attempts:
                break
            delay = answer.retry_after or min(BACKOFF_MAX, self._backoff * 2.0 ** (attempt - 1))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stop.wait()
                return
        if broken:
            # The gateway ends a 200 whose upstream failed midway: no whole answer to write.
            message = f"the backend's answer broke off, {self._max_attempts} times"
            result, prompt, completion = error_line(line.custom_id, "incomplete_response", message), 0, 0
        else:
            result, prompt, completion = answer_line(line.custom_id, answer.status, request_id, answer.body)
        ok = 200 <= answer.status < 300 and not broken
        self._writer.add(LineResult(batch.id, line.line, ok, result, prompt, completion))


def _is_json(body: bytes) -> bool:
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return True
