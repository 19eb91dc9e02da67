"""The Batch API's life cycle: create, validate, run, finalize, cancel, expire, resume after a restart.

Each unfinished batch has one driver task that takes it from whatever status the store says to a
terminal one, so a batch created now and a batch found unfinished at start go the same way:
- validating: `lines.load_lines` validates the whole input file and loads its lines, then the
  batch is in_progress, or failed with the errors list (no line runs);
- in_progress: a `BatchRun` runs the pending lines; done, it is finalizing; the completion
  window passing stops it as expired;
- finalizing, cancelling: the output and error files are written from the store, then the batch is
  completed or cancelled (expired: likewise, from in_progress).
Every status change is a compare-and-set in the store (`records.transition`), so a cancel that
races with a batch finishing takes effect or is refused, never half-applied. A cancel stops the
run at once (waiting lines leave the queue, lines in flight are closed so the backend aborts them);
answers already received are kept. Shutdown stops runs without changing their status: their
pending lines run when the gateway starts again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from gateway.batch import lines, records
from gateway.batch.filestore import FileStore
from gateway.batch.inprocess import Handler
from gateway.batch.model import ENDPOINTS, MAX_WINDOW, BatchRecord, FileRecord, new_id, parse_window
from gateway.batch.output import BATCH_CANCELLED, BATCH_EXPIRED, NOT_RUN
from gateway.batch.progress import Progress
from gateway.batch.runner import BatchRun, ResultWriter
from gateway.batch.store import Store
from gateway.batch.validation import Validation
from gateway.config.batch import BatchConfig
from gateway.metrics import Metrics
from gateway.proxy.errors import GatewayError, excerpt
from gateway.runtime.tasks import stop_tasks
from gateway.types import Clock

log = logging.getLogger("gateway.batch")

SHUTDOWN_WAIT = 10.0
"""Seconds a stopping gateway waits for drivers to commit what they have."""


class BatchService:
    def __init__(
        self,
        config: BatchConfig,
        *,
        handler: Handler,
        capacity: Callable[[str], int],
        metrics: Metrics,
        clock: Clock,
        wallclock: Callable[[], float] = time.time,
    ) -> None:
        assert config.data_dir is not None
        self.config = config
        self.store = Store(config.data_dir / "batches.sqlite3")
        self.files = FileStore(self.store, config.data_dir / "files", config.max_file_bytes, wallclock)
        self.progress = Progress(metrics, clock)
        self._handler = handler
        self._capacity = capacity
        self._wall = wallclock
        self._writer = ResultWriter(self.store, self.progress.committed)
        self._drivers: dict[str, asyncio.Task[None]] = {}
        self._runs: dict[str, BatchRun] = {}
        self._cancel_requested: set[str] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._stopping = False

    def _now(self) -> int:
        return int(self._wall())

    async def start(self) -> None:
        self.files.directory.mkdir(parents=True, exist_ok=True)
        await self.store.open()
        await self.files.remove_strays()
        self.progress.load(await self.store.run(records.status_counts))
        for b in await self.store.run(records.unfinished_batches):
            self.progress.track(b)
            self._drive(b)
        self._sweeper = asyncio.create_task(self.files.sweep_forever())

    def begin_shutdown(self) -> None:
        """Stop running lines now (they stay pending for the next start) and start no others."""
        self._stopping = True
        for run in self._runs.values():
            run.stop("shutdown")

    async def stop(self) -> None:
        self.begin_shutdown()
        tasks = [] if self._sweeper is None else [self._sweeper]
        drivers = list(self._drivers.values())
        if drivers:
            tasks += (await asyncio.wait(drivers, timeout=SHUTDOWN_WAIT))[1]  # the late ones
        await stop_tasks(tasks)
        await self.store.close()

    # -- API ------------------------------------------------------------------------------------

    async def create(self, tenant: str, payload: Mapping[str, object]) -> BatchRecord:
        endpoint, window, metadata = _checked(payload)
        input_file_id = payload.get("input_file_id")
        if not isinstance(input_file_id, str) or not input_file_id:
            raise GatewayError(
                400, "Missing required parameter: 'input_file_id'.", "missing", "input_file_id"
            )
        source = await self.files.get(tenant, input_file_id)
        if source.purpose != "batch":
            raise GatewayError(
                400, "the input file's purpose must be 'batch'", "invalid_file", "input_file_id"
            )
        now = self._now()
        b = BatchRecord(
            id=new_id("batch_"),
            tenant=tenant,
            endpoint=endpoint,
            input_file_id=input_file_id,
            completion_window=str(payload["completion_window"]),
            created_at=now,
            expires_at=now + window,
            metadata=metadata,
        )
        if not await self.store.run(records.insert_batch, b):
            raise GatewayError(
                404, f"No such File object: {excerpt(input_file_id)}", "file_not_found", "input_file_id"
            )
        self.progress.moved(b, "")
        self._drive(b)
        return b

    async def get(self, tenant: str, batch_id: str) -> BatchRecord:
        b = await self.store.run(records.get_batch, tenant, batch_id)
        if b is None:
            raise GatewayError(
                404, f"No batch found with id {excerpt(batch_id)}.", "batch_not_found", "batch_id"
            )
        return b

    async def list(self, tenant: str, after: str | None, limit: int) -> tuple[list[BatchRecord], bool]:
        return await self.store.run(records.list_batches, tenant, after, limit)

    async def cancel(self, tenant: str, batch_id: str) -> BatchRecord:
        b = await self.get(tenant, batch_id)
        if b.status in ("cancelling", "cancelled"):
            return b
        self._cancel_requested.add(batch_id)  # before any await: a driver about to run sees it
        moved = await self._move(batch_id, "cancelling", ("validating", "in_progress"))
        if moved is None:
            self._cancel_requested.discard(batch_id)
            b = await self.get(tenant, batch_id)
            raise GatewayError(
                400, f"Cannot cancel a batch with status '{b.status}'.", "invalid_status", "batch_id"
            )
        run = self._runs.get(batch_id)
        if run is not None:
            run.stop("cancelled")
        return moved

    def state(self) -> dict[str, object]:
        return self.progress.state()

    # -- driving --------------------------------------------------------------------------------

    def _drive(self, b: BatchRecord) -> None:
        task = asyncio.create_task(self._advance(b))
        self._drivers[b.id] = task
        task.add_done_callback(lambda t: self._driven(b.id, t))

    def _driven(self, batch_id: str, task: asyncio.Task[None]) -> None:
        self._drivers.pop(batch_id, None)
        self._cancel_requested.discard(batch_id)
        if not task.cancelled() and task.exception() is not None:
            log.error("batch %s stopped on an error: %r", batch_id, task.exception())

    async def _advance(self, b: BatchRecord) -> None:
        if b.status == "validating":
            b = await self._validate(b)
        if b.status == "in_progress":
            reason = "cancelled" if b.id in self._cancel_requested else await self._execute(b)
            if reason == "shutdown":
                return
            if reason == "expired":
                await self._finalize(b.id, "expired", BATCH_EXPIRED)
                return
            b = await self._move(b.id, "finalizing", ("in_progress",)) or await self.get(b.tenant, b.id)
        if b.status == "finalizing":
            await self._finalize(b.id, "completed", NOT_RUN)
        elif b.status == "cancelling":
            await self._finalize(b.id, "cancelled", BATCH_CANCELLED)

    async def _validate(self, b: BatchRecord) -> BatchRecord:
        def decide(current: BatchRecord, v: Validation) -> Mapping[str, object]:
            now = self._now()
            if current.status == "cancelling":  # cancelled while validating: lines are kept
                return {"total": v.lines, "model": v.model} if v.ok else {}
            if not v.ok:
                return records.status_changes(current, "failed", now, {"errors": v.errors})
            return records.status_changes(current, "in_progress", now, {"total": v.lines, "model": v.model})

        path = self.files.path(b.input_file_id)
        args = (b.id, path, b.endpoint, self.config.max_lines, decide)
        changes = await self.store.run(lines.load_lines, *args)
        old = b.status
        for name, value in changes.items():
            setattr(b, name, value)
        if "status" in changes:
            self.progress.moved(b, old)
        else:
            b.status = "cancelling"  # `decide` leaves a batch cancelled while validating as it is
        return b

    async def _execute(self, b: BatchRecord) -> str:
        if self._stopping:
            return "shutdown"
        model = b.model or ""
        run = BatchRun(
            b,
            self.files.path(b.input_file_id),
            store=self.store,
            handler=self._handler,
            capacity=lambda: self._capacity(model),
            writer=self._writer,
            max_attempts=self.config.max_attempts,
        )
        self._runs[b.id] = run
        timer = asyncio.get_running_loop().call_later(
            max(0.0, b.expires_at - self._wall()), run.stop, "expired"
        )
        try:
            return await run.run()
        finally:
            timer.cancel()
            self._runs.pop(b.id, None)

    async def _finalize(self, batch_id: str, status: str, unrun: tuple[str, str] | None) -> None:
        """Write the output and error files, then record them and the final status at once."""
        out_id, err_id = new_id("file-"), new_id("file-")
        out_path, err_path = self.files.path(out_id), self.files.path(err_id)
        sizes = await self.store.run(lines.write_outputs, batch_id, out_path, err_path, unrun)
        b = await self.store.run(records.get_batch, None, batch_id)
        assert b is not None
        now = self._now()
        files: list[FileRecord] = []
        extra: dict[str, object] = {}
        for file_id, size, kind in ((out_id, sizes[0], "output"), (err_id, sizes[1], "error")):
            if size:
                name = f"{batch_id}_{kind}.jsonl"
                files.append(FileRecord(file_id, b.tenant, "batch_output", name, size, now))
                extra[f"{kind}_file_id"] = file_id
        await self.store.run(lines.finish, batch_id, files, records.status_changes(b, status, now, extra))
        old = b.status
        b.status = status  # type: ignore[assignment]
        self.progress.moved(b, old)

    async def _move(self, batch_id: str, status: str, expect: tuple[str, ...]) -> BatchRecord | None:
        moved = await self.store.run(records.transition, batch_id, status, self._now(), expect)
        if moved is None:
            return None
        old, b = moved
        self.progress.moved(b, old)
        return b


def _checked(payload: Mapping[str, object]) -> tuple[str, int, dict[str, str] | None]:
    """(endpoint, completion window in seconds, metadata) of a create request, or a 400."""
    endpoint = payload.get("endpoint")
    if endpoint not in ENDPOINTS:
        raise GatewayError(
            400,
            f"endpoint must be one of {', '.join(ENDPOINTS)}, got {excerpt(endpoint)}",
            "invalid_endpoint",
            "endpoint",
        )
    window_text = payload.get("completion_window")
    window = parse_window(window_text) if isinstance(window_text, str) else None
    if window is None:
        raise GatewayError(
            400,
            f"completion_window must be like '24h' (at most {MAX_WINDOW // 3600}h), "
            f"got {excerpt(window_text)}",
            "invalid_window",
            "completion_window",
        )
    metadata = payload.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, dict)
        or len(metadata) > 16
        or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512
            for k, v in metadata.items()
        )
    ):
        raise GatewayError(
            400,
            "metadata must map at most 16 keys of up to 64 characters to strings of up to 512",
            "invalid_metadata",
            "metadata",
        )
    return str(endpoint), window, metadata
