"""Usage per tenant and model: counted as requests end, kept per minute, read back for a time range.

`record` runs on the request path: it adds to the Prometheus counters
(`gateway_tenant_tokens_total{tenant, model, kind}`, `gateway_tenant_requests_total{tenant, model}`)
and to this minute's row in memory. `run` writes the rows gathered to the store every
`flush_interval` seconds in a worker thread (SQLite blocks), and `close` writes the last ones, so a
restart loses nothing that was flushed and at most one interval of what was not (a crash). Labels
and rows name only configured tenants (requests of unknown keys are refused before) and models a
backend serves, so neither grows with what clients send.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from gateway.metrics.tenants import TenantMetrics
from gateway.tenancy.usage_store import UsageRow, UsageStore

log = logging.getLogger(__name__)

_MINUTE = 60


@dataclass(slots=True)
class _Pending:
    requests: int = 0
    prompt: int = 0
    output: int = 0


class UsageLedger:
    def __init__(
        self,
        store: UsageStore,
        metrics: TenantMetrics,
        *,
        wall: Callable[[], float],
        flush_interval: float = 5.0,
        retention_days: float = 400.0,
    ) -> None:
        self.store = store
        self._metrics = metrics
        self._wall = wall
        self.flush_interval = flush_interval
        self.retention_days = retention_days
        self._pending: dict[tuple[int, str, str], _Pending] = {}
        self._lock = asyncio.Lock()

    def record(self, tenant: str, model: str, prompt_tokens: int, output_tokens: int) -> None:
        """One request answered by a backend, with the tokens it reported (or the best estimate)."""
        self._metrics.add(tenant, model, prompt_tokens, output_tokens)
        key = (int(self._wall() // _MINUTE), tenant, model)
        row = self._pending.get(key)
        if row is None:
            row = self._pending[key] = _Pending()
        row.requests += 1
        row.prompt += prompt_tokens
        row.output += output_tokens

    async def flush(self) -> None:
        """Write what was recorded to the store, off the event loop."""
        async with self._lock:
            pending, self._pending = self._pending, {}
            rows = [UsageRow(m, t, mod, p.requests, p.prompt, p.output) for (m, t, mod), p in pending.items()]
            try:
                await asyncio.to_thread(self.store.add, rows)
            except Exception:
                for (m, t, mod), p in pending.items():  # kept for the next try
                    again = self._pending.setdefault((m, t, mod), _Pending())
                    again.requests += p.requests
                    again.prompt += p.prompt
                    again.output += p.output
                raise

    async def totals(self, start: float, end: float) -> list[UsageRow]:
        """Per tenant and model over the minutes that overlap [start, end) (Unix seconds)."""
        await self.flush()
        first, last = int(start // _MINUTE), int(-(-end // _MINUTE))
        return await asyncio.to_thread(self.store.totals, first, last)

    async def run(self) -> None:
        """Flush every `flush_interval` seconds, and prune rows past the retention once an hour."""
        pruned_at = -1e18
        while True:
            await asyncio.sleep(self.flush_interval)
            try:
                await self.flush()
                now = self._wall()
                if now - pruned_at >= 3600:
                    pruned_at = now
                    horizon = int((now - self.retention_days * 86400) // _MINUTE)
                    await asyncio.to_thread(self.store.prune, horizon)
            except Exception:
                log.exception("usage: writing to the store failed; kept in memory for the next try")

    async def close(self) -> None:
        await self.flush()
        await asyncio.to_thread(self.store.close)
