"""Counters and histograms that only the event loop writes: plain numbers, rendered at scrape.

prometheus_client's `Counter` and `Histogram` take a lock on every increment, since any thread may
write them; a request moves about eight such values (its answer, queue wait, duration, time to
first token, its tenant's tokens), and the locks were about 4% of the CPU the gateway spends per
request. Here every series is written by the event loop's thread alone and read by it too (the
gateway renders /metrics on the loop), so a float per counter and a count per bucket need no lock.

The exposition is prometheus_client's own (its metric families): the same `_total`, `_bucket`,
`_sum`, `_count` and `_created` samples, `le` bounds written as it writes them. A bucket count is
kept per bucket and summed at scrape: an observation adds to one number, `bisect` finds which.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gateway.types import Clock


class CounterSeries:
    """One label set of a `LoopCounter`."""

    __slots__ = ("created", "value")

    def __init__(self, created: float) -> None:
        self.value = 0.0
        self.created = created

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"a counter only goes up: inc({amount!r})")
        self.value += amount


class HistogramSeries:
    """One label set of a `LoopHistogram`: a count per bucket (not cumulative), the sum."""

    __slots__ = ("_bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...], created: float) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.created = created

    def observe(self, value: float) -> None:
        """Count `value` in the first bucket whose bound is at least it (the last: +Inf)."""
        self.counts[bisect_left(self._bounds, value)] += 1
        self.sum += value


S = TypeVar("S", CounterSeries, HistogramSeries)


class _Family(Collector, Generic[S]):
    """A metric family of the event loop: one series of type S per label set, made on first use."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry,
        clock: Clock,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._clock = clock
        self._series: dict[tuple[str, ...], S] = {}
        registry.register(self)

    def labels(self, *values: str) -> S:
        series = self._series.get(values)
        if series is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values!r}")
            series = self._series[values] = self._new(self._clock())
        return series

    def describe(self) -> Iterator[Metric]:
        """The family without samples: what a registry checks names against."""
        yield self._family()

    def _new(self, created: float) -> S:
        raise NotImplementedError

    def _family(self) -> Metric:
        raise NotImplementedError


class LoopCounter(_Family[CounterSeries]):
    """A counter of the event loop; `labels(*values)` gives one series to `inc`."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: CollectorRegistry,
        clock: Clock = time.time,
    ) -> None:
        super().__init__(name, documentation, labelnames, registry, clock)

    def _new(self, created: float) -> CounterSeries:
        return CounterSeries(created)

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for values, series in self._series.items():
            family.add_metric(values, series.value, created=series.created)
        yield family


class LoopHistogram(_Family[HistogramSeries]):
    """A histogram of the event loop over `buckets` (upper bounds, +Inf added); with no labels it
    is one series, observed through `observe`."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry,
        clock: Clock = time.time,
    ) -> None:
        bounds = tuple(float(b) for b in buckets if b != float("inf"))
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"{name}: buckets must be increasing, got {buckets!r}")
        self._bounds = bounds
        self._les = [*(floatToGoString(b) for b in bounds), "+Inf"]  # type: ignore[no-untyped-call]
        super().__init__(name, documentation, labelnames, registry, clock)
        self._only = None if self.labelnames else self.labels()

    def _new(self, created: float) -> HistogramSeries:
        return HistogramSeries(self._bounds, created)

    def observe(self, value: float) -> None:
        """Observe `value` on a histogram without labels."""
        if self._only is None:
            raise ValueError(f"{self.name} has labels {self.labelnames}: observe through labels()")
        self._only.observe(value)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for values, series in self._series.items():
            cumulative, buckets = 0, []
            for le, count in zip(self._les, series.counts, strict=True):
                cumulative += count
                buckets.append((le, float(cumulative)))
            family.add_metric(values, buckets, series.sum)
            labels = dict(zip(self.labelnames, values, strict=True))
            family.add_sample(f"{self.name}_created", labels, series.created)
        yield family
