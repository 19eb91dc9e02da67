"""The batch store is one process's: a second opener of the same database is refused until the
first closes it (two processes would each resume every unfinished batch)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.batch.store import Store, StoreInUse

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
