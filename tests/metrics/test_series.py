"""The event loop's counters and histograms render as prometheus_client's own would: the same
samples for the same increments and observations, read back through a registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gateway.metrics.series import LoopCounter, LoopHistogram

BUCKETS = (0.01, 0.1, 1.0, 10.0)


def samples(registry: CollectorRegistry) -> list[str]:
    """The exposition's sample lines, `_created` values left out (they are creation times)."""
    lines = generate_latest(registry).decode().splitlines()
    return [line.rsplit(" ", 1)[0] if "_created" in line else line for line in lines]


def test_a_counter_renders_as_prometheus_clients_counter() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    a = LoopCounter("requests", "Requests.", ["model", "status"], registry=ours)
    b = Counter("requests", "Requests.", ["model", "status"], registry=theirs)
    for metric in (a, b):
        metric.labels("m", "200").inc()
        metric.labels("m", "200").inc(2.5)
        metric.labels("m", "503").inc()
    assert samples(ours) == samples(theirs)
    assert ours.get_sample_value("requests_total", {"model": "m", "status": "200"}) == 3.5


@pytest.mark.parametrize("value", [0.0, 0.01, 0.010001, 0.5, 1.0, 10.0, 11.0, 1e9])
def test_a_histogram_counts_each_value_in_the_bucket_prometheus_client_does(value: float) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    a = LoopHistogram("wait_seconds", "Waits.", ["model"], buckets=BUCKETS, registry=ours)
    b = Histogram("wait_seconds", "Waits.", ["model"], buckets=BUCKETS, registry=theirs)
    for metric in (a, b):
        metric.labels("m").observe(value)
        metric.labels("m").observe(0.05)
    assert samples(ours) == samples(theirs)


def test_an_unlabelled_histogram_is_one_series_from_the_start() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    a = LoopHistogram("lag_seconds", "Lag.", buckets=BUCKETS, registry=ours)
    b = Histogram("lag_seconds", "Lag.", buckets=BUCKETS, registry=theirs)
    assert samples(ours) == samples(theirs)
    a.observe(0.2)
    b.observe(0.2)
    assert samples(ours) == samples(theirs)
    assert ours.get_sample_value("lag_seconds_count") == 1.0


def test_misuse_is_refused() -> None:
    registry = CollectorRegistry()
    counter = LoopCounter("c", "C.", ["a"], registry=registry)
    histogram = LoopHistogram("h", "H.", ["a"], buckets=BUCKETS, registry=registry)
    with pytest.raises(ValueError):
        counter.labels("x").inc(-1)
    with pytest.raises(ValueError):
        counter.labels("x", "y")
    with pytest.raises(ValueError):
        histogram.observe(1.0)  # it has labels
    with pytest.raises(ValueError):
        LoopHistogram("h2", "H.", buckets=(1.0, 0.5), registry=registry)
    with pytest.raises(ValueError):
        LoopCounter("c", "C again.", registry=registry)  # the registry refuses a second "c"
