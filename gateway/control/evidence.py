"""What one backend's requests have shown about its latency and delivery since the limit last changed.

Three sources, merged at each control tick:
- finished requests: a `SampleWindow` of TTFT, TPOT and e2e per request, restarted (`start_epoch`)
  on every limit change so the algorithm judges only the limit in force;
- first tokens: a streaming request's TTFT is recorded when its first token arrives, because it is
  known seconds before the request ends;
- requests in flight, read at the tick:
    e2e: a request older than `E2E_OVERDUE` x the e2e target has missed it by that factor; its age
      counts as an e2e value, a lower bound. Answers that come whole say nothing until they end: at
      a target the engine could not meet, the first cut waited 7-11 s for them at limit 8 on the
      real engine, and an engine that stops finishing requests is seen before the first times out.
      Twice the target, not the target: a cut is sized by the ratio it reads, and a lower bound read
      just past the target would cut a few percent a settle at a time where one cut halves the
      limit (a stream's overdue TTFT needs no such margin: first tokens keep arriving beside it
      unless the engine stalls);
    TTFT: a stream older than the TTFT target with no token yet has already missed it; its age
      counts as a TTFT value, a lower bound, so an engine that stops producing first tokens is seen
      before any of them arrives;
    TPOT: a stream with `PARTIAL_MIN_EVENTS` events counts its pace so far over k
      (gateway.control.pace), so a stall shows; a finished request's TPOT arrives seconds after a
      slowdown began, its pace within a second.
  Requests sent before the epoch began describe the old limit and do not count.

Bounds (`bounds`): when the epoch began because a burst filled the limit (`start_epoch(burst=True)`),
what the requests in flight then measure bounds the limit's latency from above
(gateway.control.bounds).

The cohorts (`cohorts`): per signal, the value of every request of the epoch in the order they were
sent, infinite for those in flight that have not measured it: no first token yet (TTFT), fewer
events than a pace needs (TPOT: the pace per event otherwise, at least the pace per token), not
finished (e2e). The values finished so far are a biased sample of a limit's latency, the fast ones
first; the requests sent first, whatever they take, are not (gateway.control.algorithms.sla.verdicts
reads the P90 of the longest such prefix with the unmeasured ones as the slowest).

k is the output tokens an event carries, learned from finished streams (gateway.control.event_size):
a pace per event over k is a pace per token, a TPOT. Until a stream has finished k is unknown, and
the pace per event is an upper bound of the pace per token (k >= 1): the paces count only while
their P90 is within the TPOT target, which the true P90 then is too. Read as the pace per token
they would read a fresh gateway's first streams k times too slow, a miss before any evidence of k
arrived; not counted at all, a fresh gateway would wait for whole answers before its first raise,
with requests waiting in its queue. Where clients do not ask for `usage` a stream's tokens are its
events and k is 1: the pace is then per event, as the finished requests' TPOT is.

Percentiles are nearest-rank P90 and P50 per signal over the newest `newest` finished values plus
the live ones; counts are per signal, because signals arrive at different times (TTFT at the first
token, TPOT when the request ends). TTFT and TPOT that no request measured while no stream is in
flight (non-streaming traffic) are taken from the backend's own histogram P90, if that scrape came
after the epoch began, and count as `min_samples` values. Never e2e, which every finished request
measures, and never while streams are in flight, which will measure TTFT and TPOT: in the first
second of an epoch the backend's histogram holds the requests that finished in the last scrape
interval, sent under the old limit, and its P90 is interpolated within buckets a factor of 2 wide
(e2e 2.5-5 s); taken as the new limit's on `min_samples` values it cut limits that met the target.

Answered tokens (`take_answered`): the output tokens of the requests that finished well since the
previous take, and of those that missed an SLA target (`SLA.met_by`), so the algorithm can weigh
each limit's goodput; a request counts once, when it finishes, since only then are its latencies
known.

Delivered tokens: output tokens since the previous `take_delivered`, counting each stream's events
as they arrive, k tokens each (1 before k is known), and, when a request finishes, the rest of its
output tokens; each token once. The rest corrects the credit to the stream's `usage` both ways, so
a k that is wrong for one stream moves its tokens between ticks and adds none; without the credit
a busy front end's merged events would leave a third of the tokens to arrive as whole answers,
which the rate comparisons read as count noise.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import NamedTuple

from gateway.control.bounds import BurstBounds, Watched
from gateway.control.event_size import TokensPerEvent
from gateway.control.pace import pace
from gateway.control.window import SampleWindow, nearest_rank
from gateway.types import SIGNALS, SLA, Clock, EngineStats, Sample, Signal, StreamProgress

E2E_OVERDUE = 2.0
"""A request in flight counts as an e2e value once its age is this multiple of the e2e target."""
STAND_INS: tuple[Signal, ...] = ("ttft", "tpot")
"""Signals the backend's histograms stand in for when no request of this epoch measured them."""


class Percentiles(NamedTuple):
    p90: dict[Signal, float]
    p50: dict[Signal, float]
    counts: dict[Signal, int]
    """How many values stand behind each P90 (`min_samples` for one read from the backend)."""
    values: dict[Signal, list[float]]
    """The values behind each measured P90, sorted."""


class LiveRequest(NamedTuple):
    """One request of the epoch in flight, read at a tick."""

    dispatched_at: float
    age: float
    streams: bool
    first_token: bool
    """A stream whose first token arrived."""
    pace: float | None
    """Its seconds per event so far (gateway.control.pace), None before it has enough events."""


class Evidence:
    """Finished samples, first tokens and streams in flight of one backend, per epoch."""

    def __init__(
        self,
        clock: Clock,
        *,
        window_seconds: float = 30.0,
        window_max_samples: int = 1000,
        min_samples: int = 8,
        sla: SLA | None = None,
    ) -> None:
        self._clock = clock
        self._min_samples = min_samples
        self.sla = sla if sla is not None else SLA()
        """The targets that make a request in flight overdue; a config reload may change them."""
        self._window = SampleWindow(clock, max_age=window_seconds, max_samples=window_max_samples)
        self._sent: dict[Hashable, Watched] = {}
        """Requests in flight: dispatch time, and a stream's progress."""
        self._counted: dict[Hashable, float] = {}
        """Tokens credited so far to each stream in flight as delivered (its events x k)."""
        self._delivered = 0.0
        """Output tokens of finished requests not yet counted, since the previous take."""
        self._lumped = (0.0, 0)
        """Those tokens and the requests they came from, since the previous `take_lumped`."""
        self._answered = (0.0, 0.0)
        """Output tokens of requests that finished well, and of those that missed a target, since
        the previous `take_answered`."""
        self._event_size = TokensPerEvent()
        self._bounds = BurstBounds()

    @property
    def epoch_start(self) -> float:
        return self._window.epoch_start

    @property
    def tokens_per_event(self) -> float | None:
        """Output tokens a stream event carries, as finished streams showed (None before any)."""
        return self._event_size.value

    @property
    def watching(self) -> int:
        """Requests in flight being watched."""
        return len(self._sent)

    def __len__(self) -> int:
        """Finished samples and first tokens in the window."""
        return len(self._window)

    def start_epoch(self, at: float, *, burst: bool = False) -> None:
        """The limit changed at `at`, or a burst filled it (`burst`): what was sent before no longer
        counts, except as the burst's bounds (see the module doc)."""
        self._window.start_epoch(at)
        self._bounds.start(self._sent if burst else ())

    # -- what requests report -----------------------------------------------------------------

    def watch(self, key: Hashable, dispatched_at: float, progress: StreamProgress | None) -> None:
        """Watch a request sent at `dispatched_at` until it finishes; `progress` if it streams."""
        self._sent[key] = (dispatched_at, progress)

    def first_token(self, dispatched_at: float, ttft: float) -> None:
        self._window.add_first_token(dispatched_at, ttft)

    def finish(self, key: Hashable, sample: Sample | None) -> None:
        """Stop watching `key`; count the output tokens it delivered that were not counted yet and
        record `sample` if the request finished well."""
        watched = self._sent.pop(key, None)
        counted = self._counted.pop(key, 0.0)
        self._bounds.finish(key, watched, sample)
        if sample is None:
            return
        remainder = sample.output_tokens - counted
        progress = None if watched is None else watched[1]
        if progress is not None and sample.ok:
            self._event_size.learn(progress.events, sample.output_tokens)
        else:
            remainder = max(0.0, remainder)  # not a stream that finished well: keep its credit
        self._delivered += remainder
        self._lumped = (self._lumped[0] + abs(remainder), self._lumped[1] + 1)
        if sample.ok:
            self._window.add(sample)
            missed = 0 if self.sla.met_by(sample) else sample.output_tokens
            self._answered = (self._answered[0] + sample.output_tokens, self._answered[1] + missed)

    # -- what the tick reads ------------------------------------------------------------------

    def live(self) -> dict[Signal, list[float]]:
        """Overdue e2e and TTFT values and the pace of this epoch's requests in flight (see the module
        doc)."""
        ttft_bound = self.sla.ttft_p90
        e2e_bound = None if self.sla.e2e_p90 is None else E2E_OVERDUE * self.sla.e2e_p90
        size = self._event_size.value
        live: dict[Signal, list[float]] = {}
        per_event: list[float] = []  # paces per event while k is unknown: TPOT upper bounds
        for request in self._in_flight():
            if e2e_bound is not None and request.age > e2e_bound:
                live.setdefault("e2e", []).append(request.age)
            if not request.streams:
                continue
            if not request.first_token:
                if ttft_bound is not None and request.age > ttft_bound:
                    live.setdefault("ttft", []).append(request.age)
                continue
            if request.pace is not None:
                if size is None:
                    per_event.append(request.pace)
                else:
                    live.setdefault("tpot", []).append(request.pace / size)
        target = self.sla.tpot_p90
        if per_event and target is not None and _rank(sorted(per_event), 0.9) <= target:
            live["tpot"] = per_event  # even at one token an event, within target
        return live

    def bounds(self) -> dict[Signal, list[float]]:
        """Upper bounds of the limit's latency from the burst that began the epoch, per signal
        (gateway.control.bounds)."""
        return self._bounds.read(self._sent, self._clock(), self._event_size.value)

    def percentiles(
        self,
        live: dict[Signal, list[float]],
        newest: int | None = None,
        backend: EngineStats | None = None,
    ) -> Percentiles:
        """P90 and P50 per signal over the newest finished values and `live`, with their counts;
        TTFT or TPOT with no values, while no stream is in flight, is read from `backend` if it was
        scraped in this epoch."""
        p90: dict[Signal, float] = {}
        p50: dict[Signal, float] = {}
        counts: dict[Signal, int] = {}
        measured: dict[Signal, list[float]] = {}
        for signal in SIGNALS:
            values = self._window.values(signal, newest)
            extra = live.get(signal)
            if extra:
                values = sorted(values + extra)
            if values:
                p90[signal] = _rank(values, 0.9)
                p50[signal] = _rank(values, 0.5)
                counts[signal] = len(values)
                measured[signal] = values
        if backend is not None and backend.at >= self._window.epoch_start and not self._streaming():
            for signal in STAND_INS:
                value = backend.p90(signal)
                if signal not in p90 and value is not None:
                    p90[signal] = value
                    counts[signal] = self._min_samples
        return Percentiles(p90, p50, counts, measured)

    def cohorts(self) -> dict[Signal, list[float]]:
        """Per signal, the value of every request sent since the epoch began, in the order they were
        sent, infinite for those in flight that have not measured it (requests that failed are not
        in it; see the module doc)."""
        size = self._event_size.value or 1.0
        sent = {signal: self._window.by_dispatch(signal) for signal in SIGNALS}
        for request in self._in_flight():
            at = request.dispatched_at
            sent["e2e"].append((at, math.inf))
            if not request.streams:
                continue
            if not request.first_token:  # a first token goes to the window as it comes
                sent["ttft"].append((at, math.inf))
            sent["tpot"].append((at, math.inf if request.pace is None else request.pace / size))
        return {signal: [value for _, value in sorted(pairs)] for signal, pairs in sent.items() if pairs}

    def _in_flight(self) -> list[LiveRequest]:
        """This epoch's requests in flight, as the clock reads now: what `live` and `cohorts` read."""
        start, now = self._window.epoch_start, self._clock()
        return [
            LiveRequest(
                dispatched_at,
                now - dispatched_at,
                progress is not None,
                progress is not None and progress.first_at is not None,
                None if progress is None or progress.first_at is None else pace(progress, now),
            )
            for dispatched_at, progress in self._sent.values()
            if dispatched_at >= start
        ]

    def per_token_values(self, newest: int | None = None) -> list[float]:
        """Sorted e2e seconds per output token of the newest finished requests with output."""
        return self._window.per_token_values(newest)

    def take_delivered(self) -> float:
        """Output tokens delivered since the previous take: finished requests' remainders plus the
        events streams in flight showed since then, k tokens each."""
        total, self._delivered = self._delivered, 0.0
        size = self._event_size.value or 1.0
        for key, (_, progress) in self._sent.items():
            if progress is None:
                continue
            credit = progress.events * size
            total += credit - self._counted.get(key, 0.0)
            self._counted[key] = credit
        return total

    def _streaming(self) -> bool:
        """Whether a stream is in flight."""
        return any(progress is not None for _, progress in self._sent.values())

    def take_lumped(self) -> tuple[float, int]:
        """Output tokens counted only as their request finished, and how many requests finished,
        since the previous take: the delivered tokens that come a whole answer at a time."""
        lumped, self._lumped = self._lumped, (0.0, 0)
        return lumped

    def take_answered(self) -> tuple[float, float]:
        """Output tokens of the requests that finished well since the previous take, and of those
        that missed an SLA target: goodput is the rest."""
        answered, self._answered = self._answered, (0.0, 0.0)
        return answered


def _rank(sorted_values: list[float], q: float) -> float:
    value = nearest_rank(sorted_values, q)
    assert value is not None  # called with at least one value
    return value
