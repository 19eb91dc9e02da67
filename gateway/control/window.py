"""Sliding windows of latency samples, bounded in time and in count, with epochs.

Percentiles are nearest-rank: the P-th percentile of n samples is the ceil(P/100 * n)-th smallest,
i.e. the smallest measured value that at least P% of the samples do not exceed. That is the
definition an SLA means ("90% of requests finished within X"), it never invents a value between two
samples, and on small windows it errs high (with 8 samples P90 is the largest), which is the safe
side for a controller that backs off on it.

Insertion is O(1) amortised (append, and pop the expired from the left); percentiles sort on demand,
which happens once per control tick, not per request.

Epochs (after Envoy's adaptive concurrency): when the limit changes, samples from requests
dispatched before the change describe the old limit, so `start_epoch(t)` drops them, and requests
still in flight from before `t` are refused when they finish.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from gateway.types import Clock, Sample, Signal


def nearest_rank(sorted_values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0 <= q <= 1) of already sorted values, nearest-rank; None when empty."""
    n = len(sorted_values)
    if n == 0:
        return None
    rank = max(1, math.ceil(q * n))
    return sorted_values[min(n, rank) - 1]


class _Entry(NamedTuple):
    recorded_at: float
    dispatched_at: float
    ttft: float | None
    tpot: float | None
    e2e: float | None
    per_token: float | None


class SampleWindow:
    """Finished-request samples from the last `max_age` seconds, at most `max_samples` of them."""

    def __init__(self, clock: Clock, *, max_age: float = 30.0, max_samples: int = 1000) -> None:
        if max_age <= 0:
            raise ValueError(f"max_age must be > 0, got {max_age}")
        if max_samples < 1:
            raise ValueError(f"max_samples must be >= 1, got {max_samples}")
        self._clock = clock
        self.max_age = max_age
        self._entries: deque[_Entry] = deque(maxlen=max_samples)
        self.epoch_start = -math.inf

    def add(self, sample: Sample) -> bool:
        """Record a sample; False (and ignored) when it was dispatched before the current epoch."""
        if sample.dispatched_at < self.epoch_start:
            return False
        now = self._clock()
        per_token = sample.e2e / sample.output_tokens if sample.output_tokens > 0 else None
        self._entries.append(
            _Entry(now, sample.dispatched_at, sample.ttft, sample.tpot, sample.e2e, per_token)
        )
        self._expire(now)
        return True

    def add_first_token(self, dispatched_at: float, ttft: float) -> bool:
        """Record a streaming request's TTFT when its first token arrives, before it finishes.

        TTFT is known long before the request ends (an output of 300 tokens takes seconds more), so
        it is counted on arrival; the finished sample then comes without it.
        """
        if dispatched_at < self.epoch_start:
            return False
        now = self._clock()
        self._entries.append(_Entry(now, dispatched_at, ttft, None, None, None))
        self._expire(now)
        return True

    def start_epoch(self, at: float) -> None:
        """Forget samples dispatched before `at` and refuse any that arrive later."""
        self.epoch_start = at
        kept = [e for e in self._entries if e.dispatched_at >= at]
        self._entries.clear()
        self._entries.extend(kept)

    def clear(self) -> None:
        self._entries.clear()

    def _expire(self, now: float) -> None:
        horizon = now - self.max_age
        entries = self._entries
        while entries and entries[0].recorded_at < horizon:
            entries.popleft()

    def __len__(self) -> int:
        self._expire(self._clock())
        return len(self._entries)

    def values(self, signal: Signal, newest: int | None = None) -> list[float]:
        """Sorted values of one signal, from the `newest` latest samples that have it (or all)."""
        self._expire(self._clock())
        return _sorted_newest(self._entries, _PICK[signal], newest)

    def by_dispatch(self, signal: Signal) -> list[tuple[float, float]]:
        """(dispatched_at, value) of the samples with a value of `signal`, in no particular order."""
        self._expire(self._clock())
        pick = _PICK[signal]
        return [(e.dispatched_at, v) for e in self._entries if (v := pick(e)) is not None]

    def per_token_values(self, newest: int | None = None) -> list[float]:
        """Sorted e2e seconds per output token, over samples that produced output."""
        self._expire(self._clock())
        return _sorted_newest(self._entries, _per_token, newest)

    def quantile(self, signal: Signal, q: float, newest: int | None = None) -> float | None:
        return nearest_rank(self.values(signal, newest), q)


def _ttft(e: _Entry) -> float | None:
    return e.ttft


def _tpot(e: _Entry) -> float | None:
    return e.tpot


def _e2e(e: _Entry) -> float | None:
    return e.e2e


def _per_token(e: _Entry) -> float | None:
    return e.per_token


_PICK: Mapping[Signal, Callable[[_Entry], float | None]] = {"ttft": _ttft, "tpot": _tpot, "e2e": _e2e}
"""The field of a sample each signal reads."""


def _sorted_newest(
    entries: deque[_Entry], pick: Callable[[_Entry], float | None], newest: int | None
) -> list[float]:
    if newest is None:
        out = [v for e in entries if (v := pick(e)) is not None]
    else:
        out = []
        for e in reversed(entries):
            v = pick(e)
            if v is not None:
                out.append(v)
                if len(out) >= newest:
                    break
    out.sort()
    return out


class SlidingMax:
    """Maximum of the values added in the last `horizon` seconds, O(1) amortised.

    A monotonic deque: a new value evicts every older value that is not larger, because those can
    never be the maximum again while the new one is in the window.
    """

    def __init__(self, horizon: float) -> None:
        if horizon <= 0:
            raise ValueError(f"horizon must be > 0, got {horizon}")
        self.horizon = horizon
        self._items: deque[tuple[float, float]] = deque()

    def add(self, at: float, value: float) -> None:
        items = self._items
        while items and items[-1][1] <= value:
            items.pop()
        items.append((at, value))

    def value(self, now: float) -> float | None:
        items = self._items
        while items and items[0][0] < now - self.horizon:
            items.popleft()
        return items[0][1] if items else None
