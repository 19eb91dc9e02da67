"""The batch store is one process's: a second opener of the same database is refused until the
first closes it (two processes would each resume every unfinished batch)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.batch.store import Store, StoreInUse
from tests.procs import ROOT, free_port, spawn_gateway

HOLD_AND_WAIT = """
import asyncio, sys
from pathlib import Path
from gateway.batch.store import Store

async def main() -> None:
    store = Store(Path(sys.argv[1]))
    await store.open()
    print("open", flush=True)
    sys.stdin.readline()

asyncio.run(main())
"""


def test_a_second_store_on_one_database_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "batches.sqlite3"
        first = Store(path)
        await first.open()
        second = Store(path)
        with pytest.raises(StoreInUse, match="in use by another gateway process"):
            await second.open()
        await second.close()
        await first.close()
        third = Store(path)
        await third.open()
        await third.close()

    asyncio.run(scenario())


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    path = tmp_path / "batches.sqlite3"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_AND_WAIT, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"

        async def refused() -> None:
            store = Store(path)
            with pytest.raises(StoreInUse):
                await store.open()
            await store.close()

        asyncio.run(refused())
    finally:
        holder.kill()
        holder.wait()

    async def reopened() -> None:
        store = Store(path)
        await store.open()
        await store.close()

    asyncio.run(reopened())


def test_a_second_gateway_on_one_data_dir_exits_with_one_clear_error(tmp_path: Path) -> None:
    config = {"backends": ["http://127.0.0.1:9"], "batch": {"data_dir": str(tmp_path)}}
    with spawn_gateway(config):
        cmd = [
            *(sys.executable, "-m", "gateway.cli", "serve", "--backend", "http://127.0.0.1:9"),
            *("--port", str(free_port()), "--data-dir", str(tmp_path)),
        ]
        result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "batches.sqlite3 is in use by another gateway process" in result.stderr
    assert "Unclosed" not in result.stderr  # what had started was closed, not left to the collector
