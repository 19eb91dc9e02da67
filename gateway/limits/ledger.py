"""What each concurrency limit delivered while it was in force: a small, time-decayed table.

One entry per limit L. Each control interval while L binds adds its delivered output tokens and
its length in seconds, and the worst P90/target ratio and that P90 measured at L:

    w = 2^(-(now - last update) / half_life)
    tokens <- w x tokens + delivered,  seconds <- w x seconds + interval,  rate = tokens / seconds
    ratio  <- the newest value (the window P90 already averages over the requests behind it)

Why decayed sums rather than the latest interval: one second of a non-streaming workload holds a
handful of finished requests, so a rate over one interval is too noisy to compare two limits; the
half-life keeps what a limit delivered minutes ago (another capacity, another mix) from deciding.
Entries not updated for `memory` seconds are forgotten, so every conclusion drawn from the table
(the best limit, a latency floor the limit does not control) is re-measured that often.
Pure: the caller passes the time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Entry:
    limit: int
    tokens: float
    seconds: float
    ratio: float | None
    """Worst P90 / target measured at this limit (None before any P90)."""
    p90: float | None
    """That worst signal's P90 in seconds."""
    at: float

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class Ledger:
    def __init__(self, half_life: float, memory: float) -> None:
        if not 0 < half_life <= memory:
            raise ValueError(f"ledger needs 0 < half_life ({half_life}) <= memory ({memory})")
        self.half_life = half_life
        self.memory = memory
        self._entries: dict[int, Entry] = {}

    def _entry(self, now: float, limit: int) -> Entry:
        self._entries = {k: e for k, e in self._entries.items() if now - e.at <= self.memory}
        e = self._entries.get(limit)
        if e is None:
            e = self._entries[limit] = Entry(limit, 0.0, 0.0, None, None, now)
        return e

    def record_rate(self, now: float, limit: int, tokens: float, seconds: float) -> Entry:
        """Add one interval's delivery at `limit`; forget entries older than `memory`."""
        e = self._entry(now, limit)
        w = 0.5 ** ((now - e.at) / self.half_life)
        e.tokens = w * e.tokens + tokens
        e.seconds = w * e.seconds + seconds
        e.at = now
        return e

    def record_ratio(self, now: float, limit: int, ratio: float, p90: float) -> Entry:
        """The worst P90/target ratio (and that P90) measured at `limit`."""
        e = self._entry(now, limit)
        e.ratio, e.p90, e.at = ratio, p90, now
        return e

    def get(self, limit: int) -> Entry | None:
        return self._entries.get(limit)

    def fresh(self, now: float, min_seconds: float = 0.0) -> list[Entry]:
        """Entries updated within `memory` with at least `min_seconds` of measurement, by limit."""
        return sorted(
            (e for e in self._entries.values() if now - e.at <= self.memory and e.seconds >= min_seconds),
            key=lambda e: e.limit,
        )

    def best(self, now: float, min_seconds: float) -> Entry | None:
        """The fresh entry with the highest delivery rate (the lower limit on a tie)."""
        entries = self.fresh(now, min_seconds)
        return max(entries, key=lambda e: (e.rate, -e.limit)) if entries else None

    def below(self, now: float, limit: int) -> Entry | None:
        """The fresh entry with a latency ratio at the highest limit below `limit`."""
        lower = [e for e in self.fresh(now) if e.limit < limit and e.ratio is not None]
        return lower[-1] if lower else None
