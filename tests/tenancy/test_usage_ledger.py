"""Usage per tenant and model in SQLite: per-minute rows, sums over a range, kept across a reopen."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import CollectorRegistry

from gateway.metrics.tenants import TenantMetrics
from gateway.tenancy.usage import UsageLedger
from gateway.tenancy.usage_store import UsageStore


def ledger(data_dir: Path | None, clock: list[float]) -> UsageLedger:
    metrics = TenantMetrics(CollectorRegistry())
    return UsageLedger(UsageStore(data_dir), metrics, wall=lambda: clock[0])


def test_rows_are_per_minute_and_a_range_sums_the_minutes_it_overlaps(tmp_path: Path) -> None:
    clock = [600.0]  # minute 10

    async def run() -> None:
        first = ledger(tmp_path, clock)
        first.record("a", "m", 100, 10)
        first.record("a", "m", 50, 5)
        clock[0] = 665.0  # minute 11
        first.record("a", "m", 7, 3)
        first.record("b", "m", 1, 1)
        await first.close()
        again = ledger(tmp_path, clock)  # a restart: the file is all there is
        rows = {(r.tenant, r.model): r for r in await again.totals(600.0, 720.0)}
        assert (
            rows[("a", "m")].requests,
            rows[("a", "m")].prompt_tokens,
            rows[("a", "m")].output_tokens,
        ) == (
            3,
            157,
            18,
        )
        only_minute_11 = await again.totals(660.0, 661.0)
        assert [(r.tenant, r.requests) for r in only_minute_11] == [("a", 1), ("b", 1)]
        assert await again.totals(0.0, 600.0) == []
        await again.close()

    asyncio.run(run())


def test_without_a_directory_usage_is_kept_in_memory() -> None:
    async def run() -> None:
        mem = ledger(None, [0.0])
        mem.record("a", "m", 1, 2)
        assert not mem.store.persistent
        assert [(r.prompt_tokens, r.output_tokens) for r in await mem.totals(0.0, 60.0)] == [(1, 2)]
        await mem.close()

    asyncio.run(run())
