"""The Files API over the store: upload, look up, list, delete, stream content, expire.

A file's bytes are `data_dir/files/<file id>`; its row in `files` says whose it is. Uploads take
`purpose=batch` and a `.jsonl` name (the Batch API's input; OpenAI refuses other names for it) and
an optional `expires_after` (anchor `created_at`, 1 hour to 30 days, as OpenAI allows); expired
files are deleted by a sweep every `SWEEP_INTERVAL` seconds and at start, unless a running batch
still reads them. A file an unfinished batch reads cannot be deleted (400): the batch needs it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from gateway.batch import records
from gateway.batch.files import receive_upload, send_file
from gateway.batch.model import FileRecord, new_id
from gateway.batch.store import Store
from gateway.proxy.errors import GatewayError, excerpt
from gateway.types import Receive, Scope, Send

log = logging.getLogger("gateway.batch")

SWEEP_INTERVAL = 3600.0
EXPIRY_RANGE = (3600, 30 * 24 * 3600)


class FileStore:
    def __init__(self, store: Store, directory: Path, max_bytes: int, wallclock: Callable[[], float]) -> None:
        self.directory = directory
        self._store = store
        self._max_bytes = max_bytes
        self._wall = wallclock

    def path(self, file_id: str) -> Path:
        return self.directory / file_id

    async def remove_strays(self) -> None:
        """Delete files on disk that no row names (a crash between writing and committing)."""
        known = await self._store.run(records.file_ids)
        for path in await asyncio.to_thread(lambda: list(self.directory.iterdir())):
            if path.name not in known:
                await asyncio.to_thread(path.unlink, missing_ok=True)

    async def upload(self, tenant: str, scope: Scope, receive: Receive) -> FileRecord:
        file_id = new_id("file-")
        path = self.path(file_id)
        form = await receive_upload(scope, receive, path, self._max_bytes)
        try:
            now = int(self._wall())
            record = FileRecord(
                file_id, tenant, "batch", form.filename, form.size, now, _expiry(form.fields, now)
            )
            if form.fields.get("purpose") != "batch":
                raise GatewayError(
                    400,
                    "purpose must be 'batch': files here are Batch API inputs",
                    "invalid_purpose",
                    "purpose",
                )
            if not form.filename.endswith(".jsonl"):
                raise GatewayError(
                    400, "Invalid file format for Batch API. Must be .jsonl", "invalid_file", "file"
                )
            await self._store.run(records.insert_file, record)
        except BaseException:
            await asyncio.to_thread(path.unlink, missing_ok=True)
            raise
        return record

    async def get(self, tenant: str, file_id: str) -> FileRecord:
        record = await self._store.run(records.get_file, tenant, file_id)
        if record is None:
            raise GatewayError(404, f"No such File object: {excerpt(file_id)}", "file_not_found", "file_id")
        return record

    async def list(
        self, tenant: str, purpose: str | None, after: str | None, limit: int, ascending: bool
    ) -> tuple[list[FileRecord], bool]:
        return await self._store.run(records.list_files, tenant, purpose, after, limit, ascending)

    async def delete(self, tenant: str, file_id: str) -> None:
        await self.get(tenant, file_id)
        users = await self._store.run(records.delete_unused_file, file_id)
        if users:
            raise GatewayError(
                400, f"file {file_id} is the input of unfinished batch {users[0]}", "file_in_use", "file_id"
            )
        await asyncio.to_thread(self.path(file_id).unlink, missing_ok=True)

    async def send_content(self, tenant: str, file_id: str, send: Send) -> None:
        record = await self.get(tenant, file_id)
        await send_file(send, self.path(file_id), record.bytes)

    async def sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:
                log.exception("sweeping expired files failed")
            await asyncio.sleep(SWEEP_INTERVAL)

    async def sweep(self) -> None:
        for file_id in await self._store.run(records.expired_files, int(self._wall())):
            if not await self._store.run(records.delete_unused_file, file_id):
                await asyncio.to_thread(self.path(file_id).unlink, missing_ok=True)
                log.info("file %s expired and was deleted", file_id)


def _expiry(fields: dict[str, str], now: int) -> int | None:
    anchor, seconds = fields.get("expires_after[anchor]"), fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return None
    lo, hi = EXPIRY_RANGE
    if anchor != "created_at" or seconds is None or not seconds.isdigit() or not lo <= int(seconds) <= hi:
        raise GatewayError(
            400,
            f"expires_after needs anchor 'created_at' and seconds between {lo} and {hi}",
            "invalid_expires_after",
            "expires_after",
        )
    return now + int(seconds)
