"""The count of requests in flight against the limit in force, and the slots that hold it.

`InFlight.acquire` admits one request while count < limit and hands back a `Slot`; `Slot.release`
gives it back. Each slot is released exactly once (a second release raises), so the count is the
number of admitted requests that have not ended, on every path.

Rules:
- The count is of sequences: a request the engine runs as n sequences (OpenAI's `n`, several
  prompts) counts n, capped at the limit, since the engine's batch, KV cache and step time grow with
  sequences, not requests (vLLM's own running count fans `n` out the same way).
- The count never exceeds the limit at acquire: the caller asks `has_room` first, and `acquire`
  refuses rather than overbook, because an overbooked backend is what the limit exists to prevent.
  A request of n sequences is admitted while one slot is free, so it may take the count past the
  limit by n - 1 until it ends; nothing more is admitted meanwhile.
- The limit may drop below the count (a cut, a lower ceiling); requests in flight finish, and no new
  one is admitted until the count is below the new limit.
- `peak` is the highest count since the last `reset_peak`: whether the limit was binding between
  two control ticks, which the count at the tick alone cannot tell.
- A slot reports what it learns (when the request was sent, a stream's progress, its first token,
  how the request ended) to a `SlotEvents` receiver; after release it reports nothing more, so a
  late event from a finished stream cannot count.

Hot path: `acquire` and `Slot.release` do constant work and allocate one `Slot` per request.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from gateway.types import Sample, StreamProgress


class SlotEvents(Protocol):
    """Where a slot reports what its request showed while it held the slot."""

    def sent(
        self, slot: Slot, dispatched_at: float, progress: StreamProgress | None, most_tokens: int | None
    ) -> None:
        """The request was sent; a stream's `progress` can be read until the slot is released (None
        for an answer that comes whole); `most_tokens`: what one of its sequences holds at most, if
        the request says."""

    def first_token(self, dispatched_at: float, ttft: float) -> None:
        """The request's first token arrived after `ttft` seconds."""

    def finished(self, slot: Slot, sample: Sample | None) -> None:
        """The request ended; `sample` if it finished well (its TTFT removed if already reported)."""


class InFlight:
    """Requests in flight on one backend, against the limit in force."""

    __slots__ = ("_count", "_events", "_limit", "_peak")

    def __init__(self, limit: int, events: SlotEvents) -> None:
        self._limit = limit
        self._events = events
        self._count = 0
        self._peak = 0

    @property
    def count(self) -> int:
        return self._count

    @property
    def peak(self) -> int:
        """Highest count since the last `reset_peak`."""
        return self._peak

    @property
    def limit(self) -> int:
        return self._limit

    def has_room(self) -> bool:
        return self._count < self._limit

    def acquire(self, sequences: int = 1) -> Slot:
        """A slot for a request of `sequences` sequences (counted up to the limit)."""
        if self._count >= self._limit:
            raise RuntimeError(f"no room: {self._count} in flight, limit {self._limit}")
        weight = 1 if sequences <= 1 else min(sequences, max(1, self._limit))
        self._count += weight
        if self._count > self._peak:
            self._peak = self._count
        return Slot(self, self._events, weight)

    def release(self, weight: int = 1) -> None:
        """A request of `weight` counted sequences ended. Called by `Slot.release` only, which
        guarantees once per slot."""
        self._count -= weight

    def set_limit(self, limit: int) -> None:
        """Apply a new limit; whoever raised it tells the waiters (gateway.runtime.loops)."""
        self._limit = limit

    def reset_peak(self) -> None:
        self._peak = self._count


class Slot:
    """One admitted request's hold on a backend. Release exactly once."""

    __slots__ = ("_events", "_inflight", "_released", "_ttft_reported", "weight")

    def __init__(self, inflight: InFlight, events: SlotEvents, weight: int = 1) -> None:
        self._inflight = inflight
        self._events = events
        self.weight = weight
        """Sequences this slot counts in flight."""
        self._released = False
        self._ttft_reported = False

    def sent(
        self, dispatched_at: float, progress: StreamProgress | None = None, most_tokens: int | None = None
    ) -> None:
        """The request was sent: its age, and a stream's `progress`, are watched until the slot is
        released.

        The request's age bounds its e2e from below, and a stream's its TTFT until the first token;
        after a few tokens, a stream's pace so far estimates its TPOT. All count at the control tick,
        before the request ends.
        """
        if not self._released:
            self._events.sent(self, dispatched_at, progress, most_tokens)

    def first_token(self, dispatched_at: float, ttft: float) -> None:
        """The request's first token arrived: its TTFT counts now, not when the request ends."""
        if not self._released and not self._ttft_reported:
            self._ttft_reported = True
            self._events.first_token(dispatched_at, ttft)

    @property
    def released(self) -> bool:
        return self._released

    def release(self, sample: Sample | None = None) -> None:
        """Give the slot back; record `sample` if the request finished well. Twice is a bug."""
        if self._released:
            raise RuntimeError("slot released twice")
        self._released = True
        if self._ttft_reported and sample is not None and sample.ttft is not None:
            sample = replace(sample, ttft=None)
        try:
            self._events.finished(self, sample)
        finally:
            self._inflight.release(self.weight)  # the count goes down even if recording the sample failed
