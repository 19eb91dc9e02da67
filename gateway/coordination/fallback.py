"""Whether shared state is in use, and the local share of a limit while it is not. Pure.

Modes: `shared` while Redis answers; `fallback` from the first failed call until a renewal gets
through again (and before the first one succeeds: a process that never reached Redis cannot know
how many others there are). The rules and why:
- Enter on the first failure, not after several: while Redis does not answer no slot can be taken
  through it, so each request would wait a timeout before being served anyway.
- In fallback each process admits up to `max(1, limit // replicas)`: the last limit it saw for the
  backend split over the last count of live processes. Floor division, so the replicas together
  stay at or under the limit; at least one, so a backend is never stopped. Never unlimited: with
  no count known, the process counts itself alone against the limit it was given.
- The share counts only this process's requests: the others' cannot be seen without Redis. So
  while the requests admitted through Redis before the loss still run, a process holding fewer
  than its share admits beside them, and the backend may hold up to the limit plus the shares;
  waiting for the others to drain would stop a backend for as long as their longest request.
- Leave only on a successful renewal, which also puts this process's running requests back into
  Redis (a rebuild without a restart); a single answered call says nothing about the next.
"""

from __future__ import annotations

from enum import StrEnum

from gateway.types import Clock


class Mode(StrEnum):
    SHARED = "shared"
    FALLBACK = "fallback"


class Fallback:
    def __init__(self, *, clock: Clock) -> None:
        self._clock = clock
        self.mode = Mode.FALLBACK
        self.since = clock()
        """Clock time the current mode began."""
        self.reason = "not connected yet"
        self.replicas = 1
        """Live processes at the last successful renewal, this one included."""
        self.losses = 0
        """Times shared state was lost (entries into fallback after having been shared)."""

    @property
    def shared(self) -> bool:
        return self.mode is Mode.SHARED

    def contact(self, replicas: int) -> bool:
        """A renewal succeeded with `replicas` live processes. True when this ends a fallback."""
        self.replicas = max(1, replicas)
        if self.mode is Mode.SHARED:
            return False
        self.mode, self.since, self.reason = Mode.SHARED, self._clock(), ""
        return True

    def lost(self, reason: str) -> bool:
        """A call to Redis failed. True when this starts a fallback."""
        if self.mode is Mode.FALLBACK:
            return False
        self.mode, self.since, self.reason = Mode.FALLBACK, self._clock(), reason
        self.losses += 1
        return True

    def local_share(self, limit: int) -> int:
        """This process's part of `limit` while in fallback."""
        return max(1, limit // self.replicas)

    def seconds_in_mode(self) -> float:
        return self._clock() - self.since
