"""Upper bounds of a limit's latency from the burst that filled it.

When an epoch begins because a burst filled the limit (gateway.control.room), the requests in flight
then were sent together and prefill together, so their latency bounds from above what the limit
shows once arrivals spread out: what they measure counts toward a raise, never toward a cut
(gateway.control.algorithms.sla.verdicts.growth_evidence). Each stream of the burst is one TTFT and
one TPOT value (finished, or its pace per event, gateway.control.pace, at least the pace per token
since an event carries k >= 1 tokens), infinity while it has not measured it, so a P90 over them is
an upper bound whatever the slow ones take; they come before the epoch's own requests in its cohorts
(gateway.control.evidence). Not e2e: for whole answers the epoch's own cohort does the same. Why: at
a fresh gateway's limit every request is one of the burst; waiting for `min_samples` requests sent
after it took two whole answers at that limit (14 s of 4-s answers in virtual time), with arrivals
waiting in the gateway's queue. A limit change ends them: they describe the old limit.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping

from gateway.control.pace import pace
from gateway.types import Sample, Signal, StreamProgress

Watched = tuple[float, StreamProgress | None]
"""A request in flight: its dispatch time, and a stream's progress."""


class BurstBounds:
    """The requests of the burst that began the epoch, and what the finished ones measured."""

    def __init__(self) -> None:
        self._keys: set[Hashable] = set()
        """The requests in flight when a burst filled the limit, until they finish."""
        self._values: dict[Signal, list[float]] = {}
        """What the burst's finished requests measured."""

    def start(self, in_flight: Iterable[Hashable]) -> None:
        """A burst filled the limit with `in_flight` (empty: an epoch begun by a limit change)."""
        self._keys = set(in_flight)
        self._values = {}

    def finish(self, key: Hashable, watched: Watched | None, sample: Sample | None) -> None:
        """`key` ended; if it was of the burst and finished well, keep what it measured (its TTFT
        from its progress, if reported at the first token)."""
        if key not in self._keys:
            return
        self._keys.discard(key)
        if sample is None or not sample.ok or watched is None:
            return
        dispatched_at, progress = watched
        ttft = sample.ttft
        if ttft is None and progress is not None and progress.first_at is not None:
            ttft = progress.first_at - dispatched_at
        measured: tuple[tuple[Signal, float | None], ...] = (("ttft", ttft), ("tpot", sample.tpot))
        for signal, value in measured:
            if value is not None:
                self._values.setdefault(signal, []).append(value)

    def read(
        self, sent: Mapping[Hashable, Watched], now: float, tokens_per_event: float | None
    ) -> dict[Signal, list[float]]:
        """Per signal, what the burst's requests measured, infinity for those in flight (in `sent`)
        that have not (see the module doc)."""
        if not self._keys and not self._values:
            return {}
        found = {signal: list(values) for signal, values in self._values.items()}
        for key in self._keys:
            dispatched_at, progress = sent[key]
            if progress is None:
                continue
            first, per_event = progress.first_at, pace(progress, now)
            found.setdefault("ttft", []).append(math.inf if first is None else first - dispatched_at)
            tpot = math.inf if per_event is None else per_event / (tokens_per_event or 1.0)
            found.setdefault("tpot", []).append(tpot)
        return found
