"""What the batches are doing, kept in memory for `/admin/state` and `/metrics`.

Counts of batches by status (loaded from the store at start, then moved on every transition), the
lines of each unfinished batch (total, completed, failed; pending is the rest), and the tokens of
answered lines over the last `RATE_WINDOW` seconds: batch tokens/s = tokens in the window / window.
Counters (lines answered, tokens) go to Prometheus as they are committed; gauges read `by_status`
and `pending` at scrape (gateway.metrics.live).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

from gateway.batch.lines import LineResult
from gateway.batch.model import STATUSES, BatchRecord
from gateway.metrics import Metrics
from gateway.types import Clock

RATE_WINDOW = 30.0


@dataclass(slots=True)
class _Active:
    tenant: str
    model: str | None
    status: str
    total: int
    completed: int
    failed: int


class Progress:
    def __init__(self, metrics: Metrics, clock: Clock) -> None:
        self._clock = clock
        self._statuses: Counter[str] = Counter()
        self._active: dict[str, _Active] = {}
        self._tokens: deque[tuple[float, int]] = deque()
        self._lines = {o: metrics.batch.lines.labels(o) for o in ("completed", "failed")}
        self._kinds = {k: metrics.batch.tokens.labels(k) for k in ("prompt", "completion")}

    def load(self, counts: dict[str, int]) -> None:
        self._statuses = Counter(counts)

    def track(self, b: BatchRecord) -> None:
        """An unfinished batch, as the store has it now."""
        self._active[b.id] = _Active(b.tenant, b.model, b.status, b.total, b.completed, b.failed)

    def moved(self, b: BatchRecord, old: str) -> None:
        """`b` went from status `old` to `b.status` ("" for a new batch)."""
        if old:
            self._statuses[old] -= 1
        self._statuses[b.status] += 1
        if b.active:
            self.track(b)
        else:
            self._active.pop(b.id, None)

    def committed(self, results: list[LineResult]) -> None:
        tokens = 0
        for r in results:
            active = self._active.get(r.batch_id)
            if active is not None:
                if r.ok:
                    active.completed += 1
                else:
                    active.failed += 1
            self._lines["completed" if r.ok else "failed"].inc()
            self._kinds["prompt"].inc(r.prompt_tokens)
            self._kinds["completion"].inc(r.completion_tokens)
            tokens += r.prompt_tokens + r.completion_tokens
        self._tokens.append((self._clock(), tokens))

    def tokens_per_second(self) -> float:
        horizon = self._clock() - RATE_WINDOW
        while self._tokens and self._tokens[0][0] < horizon:
            self._tokens.popleft()
        return sum(n for _, n in self._tokens) / RATE_WINDOW

    def pending(self) -> int:
        return sum(a.total - a.completed - a.failed for a in self._active.values())

    def state(self) -> dict[str, object]:
        return {
            "by_status": self.by_status(),
            "lines": {
                "completed": sum(a.completed for a in self._active.values()),
                "failed": sum(a.failed for a in self._active.values()),
                "pending": self.pending(),
            },
            "tokens_per_second": round(self.tokens_per_second(), 1),
            "active": [
                {
                    "id": bid,
                    "tenant": a.tenant,
                    "model": a.model,
                    "status": a.status,
                    "total": a.total,
                    "completed": a.completed,
                    "failed": a.failed,
                }
                for bid, a in self._active.items()
            ],
        }

    def by_status(self) -> dict[str, int]:
        return {s: self._statuses.get(s, 0) for s in STATUSES}
