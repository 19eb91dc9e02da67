"""What each concurrency limit delivered while it was in force: a small, time-decayed table.

One entry per limit L. Each control interval while L binds adds its delivered output tokens, its
length in seconds, the requests that finished, the tokens that came in one piece when a request
finished (a non-streaming answer), the output tokens of the requests that finished and of those
that missed an SLA target, the requests held outside the engine and those it ran; the worst
P90/target ratio measured at L; and each signal's newest P90 and ratio read there on evidence:

    w = 2^(-(now - last update) / half_life)
    x <- w x x + this interval's x   for tokens, seconds, finished, lumped, answered, missed,
                                     hidden, running
    rate = tokens / seconds,  hidden (running) = mean requests in flight that the engine did not
    count (that it ran), over the seconds it was read
    ratio, readings <- the newest values (the window P90 already averages over the requests behind it)
    noise = (lumped / tokens) / sqrt(finished)    relative standard deviation of the rate
    met = 1 - missed / answered                   share of the output that met every target
    goodput = rate x met,  its standard deviation  rate x sqrt((met x noise)^2 + met (1 - met) / finished)
    outside seconds = hidden x seconds / finished    mean seconds a request spent outside the
                                                     engine (Little's law: mean held / rate)
    waiting = L - running - hidden                   mean requests the engine held in its queue

Why decayed sums rather than the latest interval: one second of a non-streaming workload holds a
handful of finished requests, so a rate over one interval is too noisy to compare two limits; the
half-life keeps what a limit delivered minutes ago (another capacity, another mix) from deciding.
Why the noise: tokens that arrive a whole answer at a time are a count of finished requests times
their length, and a count of n events varies by about sqrt(n) (Poisson); tokens streamed one at a
time vary far less, so only the lumped share carries that noise.
Why goodput as rate x met: the rate is the engine's own count where there is one, without lumps,
and only finished requests say whether they met the targets; their share of n finished varies as a
binomial count does, by sqrt(met (1 - met) / n).
Entries not updated for `memory` seconds are forgotten, so every conclusion drawn from the table
(the best limit, a knee, a latency floor the limit does not control) is re-measured that often.
Whether an entry stands on enough measurement is judged on its seconds not decayed: the sums decay
only when updated, so a limit measured again after a gap would weigh less than one left alone since
before it, and "the limit with the most throughput" went from two limits measured lately to one
measured 25 s earlier at two thirds of their rate.
Pure: the caller passes the time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from gateway.types import Signal


class Reading(NamedTuple):
    """One signal's window P90 at a limit, and its ratio to the target."""

    ratio: float
    p90: float


@dataclass(slots=True)
class TimeWeightedMean:
    """A gauge's mean over the seconds it was read; each `add` first keeps w of what is behind it
    (an entry's decay, or 1 to keep it all)."""

    total: float = 0.0
    seconds: float = 0.0

    def add(self, w: float, value: float | None, seconds: float) -> None:
        self.total *= w
        self.seconds *= w
        if value is not None:
            self.total += value * seconds
            self.seconds += seconds

    @property
    def mean(self) -> float | None:
        return self.total / self.seconds if self.seconds > 0 else None


@dataclass(slots=True)
class Entry:
    limit: int
    at: float
    tokens: float = 0.0
    seconds: float = 0.0
    measured: float = 0.0
    """Seconds of measurement behind the entry, not decayed: whether it stands on enough."""
    finished: float = 0.0
    lumped: float = 0.0
    answered: float = 0.0
    """Output tokens of the requests that finished."""
    missed: float = 0.0
    """Of those, the tokens of requests that missed an SLA target."""
    outside: TimeWeightedMean = field(default_factory=TimeWeightedMean)
    """Requests in flight that the engine counted neither running nor waiting."""
    batch: TimeWeightedMean = field(default_factory=TimeWeightedMean)
    """Requests the engine ran."""
    ratio: float | None = None
    """Worst P90 / target measured at this limit (None before any P90)."""
    readings: dict[Signal, Reading] = field(default_factory=dict)
    """Each signal's newest P90 read here on evidence (sla.verdicts.readings)."""

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def noise(self) -> float:
        """Relative standard deviation of `rate` from the count of lumped answers behind it."""
        if self.tokens <= 0 or self.lumped <= 0:
            return 0.0
        return (self.lumped / self.tokens) / math.sqrt(max(self.finished, 1.0))

    @property
    def met(self) -> float:
        """Share of the answered output whose request met every target (1 before any answered)."""
        return 1.0 - self.missed / self.answered if self.answered > 0 else 1.0

    @property
    def met_sd(self) -> float:
        """Standard deviation of `met`, a share of the answers finished: sqrt(met (1 - met) / n)."""
        return math.sqrt(self.met * (1.0 - self.met) / max(self.finished, 1.0))

    def delivery(self, good: bool) -> tuple[float, float]:
        """Output tokens/s and its standard deviation; with `good` of goodput, the tokens of requests
        that met every target."""
        if not good:
            return self.rate, self.rate * self.noise
        return self.rate * self.met, self.rate * math.hypot(self.met * self.noise, self.met_sd)

    @property
    def hidden(self) -> float | None:
        """Mean requests in flight that the engine did not count (None if never measured)."""
        return self.outside.mean

    @property
    def running(self) -> float | None:
        """Mean requests the engine ran (None if never measured)."""
        return self.batch.mean

    @property
    def waiting(self) -> float | None:
        """Mean requests in flight at this limit that the engine held waiting: those it neither ran
        nor left outside (an entry is recorded while the limit binds); None if never measured."""
        if self.running is None or self.hidden is None:
            return None
        return max(0.0, self.limit - self.running - self.hidden)

    @property
    def outside_seconds(self) -> float | None:
        """Mean seconds a request spent in flight outside the engine, by Little's law: the mean
        requests held there over the requests finished per second (None before any finished)."""
        if self.hidden is None or self.finished <= 0:
            return None
        return self.hidden * self.seconds / self.finished


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
            e = self._entries[limit] = Entry(limit, now)
        return e

    def record_rate(
        self,
        now: float,
        limit: int,
        tokens: float,
        seconds: float,
        *,
        finished: float = 0.0,
        lumped: float = 0.0,
        answered: float = 0.0,
        missed: float = 0.0,
        hidden: float | None = None,
        running: float | None = None,
    ) -> Entry:
        """Add one interval's delivery at `limit`; forget entries older than `memory`."""
        e = self._entry(now, limit)
        w = 0.5 ** ((now - e.at) / self.half_life)
        e.tokens = w * e.tokens + tokens
        e.seconds = w * e.seconds + seconds
        e.measured += seconds
        e.finished = w * e.finished + finished
        e.lumped = w * e.lumped + lumped
        e.answered = w * e.answered + answered
        e.missed = w * e.missed + missed
        e.outside.add(w, hidden, seconds)
        e.batch.add(w, running, seconds)
        e.at = now
        return e

    def record_ratio(self, now: float, limit: int, ratio: float) -> Entry:
        """The worst P90/target ratio measured at `limit`."""
        e = self._entry(now, limit)
        e.ratio, e.at = ratio, now
        return e

    def record_readings(self, now: float, limit: int, readings: Mapping[Signal, Reading]) -> None:
        """The P90s read at `limit` on evidence; a signal not read keeps its last reading."""
        if readings:
            e = self._entry(now, limit)
            e.readings.update(readings)
            e.at = now

    def forget_latency(self, keep: int) -> None:
        """Forget the P90s and the targets missed at every limit but `keep`: they describe conditions
        that have gone."""
        for e in self._entries.values():
            if e.limit != keep:
                e.ratio = None
                e.readings.clear()
                e.answered, e.missed = 0.0, 0.0

    def get(self, limit: int) -> Entry | None:
        return self._entries.get(limit)

    def fresh(self, now: float, min_seconds: float = 0.0) -> list[Entry]:
        """Entries updated within `memory` with at least `min_seconds` of measurement, by limit."""
        return sorted(
            (e for e in self._entries.values() if now - e.at <= self.memory and e.measured >= min_seconds),
            key=lambda e: e.limit,
        )

    def best(self, now: float, min_seconds: float, *, good: bool) -> Entry | None:
        """The fresh entry with the highest delivery rate, or goodput if `good` (the lower limit on a
        tie)."""
        entries = self.fresh(now, min_seconds)
        return max(entries, key=lambda e: (e.delivery(good)[0], -e.limit)) if entries else None

    def below(self, now: float, limit: int) -> Entry | None:
        """The fresh entry with a latency ratio at the highest limit below `limit`."""
        lower = [e for e in self.fresh(now) if e.limit < limit and e.ratio is not None]
        return lower[-1] if lower else None
