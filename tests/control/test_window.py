from __future__ import annotations

import pytest

from gateway.control.window import SampleWindow, SlidingMax, nearest_rank
from gateway.types import Sample
from tests.clock import FakeClock


def sample(e2e: float, *, at: float = 0.0, ttft: float | None = None, out: int = 0) -> Sample:
    return Sample(dispatched_at=at, e2e=e2e, ttft=ttft, output_tokens=out)


def test_nearest_rank_definition() -> None:
    values = [float(v) for v in range(1, 11)]  # 1..10
    assert nearest_rank(values, 0.9) == 9.0  # ceil(0.9 * 10) = 9th
    assert nearest_rank(values, 0.5) == 5.0
    assert nearest_rank(values, 0.91) == 10.0
    assert nearest_rank(values, 0.0) == 1.0
    assert nearest_rank(values[:8], 0.9) == 8.0  # small windows err high
    assert nearest_rank([], 0.9) is None


def test_p90_and_p50_per_signal_skip_missing_values() -> None:
    w = SampleWindow(FakeClock())
    for i in range(1, 11):
        # Odd requests streamed (have ttft); even ones did not.
        w.add(sample(float(i), ttft=i / 10 if i % 2 else None))
    assert w.quantile("e2e", 0.9) == 9.0
    assert w.quantile("ttft", 0.9) == 0.9  # over 0.1, 0.3, 0.5, 0.7, 0.9
    assert w.quantile("tpot", 0.9) is None
    assert w.quantile("e2e", 0.5) == 5.0


def test_time_bound() -> None:
    clock = FakeClock()
    w = SampleWindow(clock, max_age=10.0)
    w.add(sample(100.0))
    clock.now = 5.0
    w.add(sample(1.0, at=5.0))
    assert len(w) == 2
    clock.now = 10.5  # the first sample is 10.5 s old
    assert len(w) == 1
    assert w.quantile("e2e", 0.9) == 1.0


def test_count_bound_keeps_newest() -> None:
    w = SampleWindow(FakeClock(), max_samples=3)
    for v in (9.0, 8.0, 1.0, 2.0, 3.0):
        w.add(sample(v))
    assert w.values("e2e") == [1.0, 2.0, 3.0]


def test_epoch_drops_old_dispatches_and_refuses_late_ones() -> None:
    clock = FakeClock(20.0)
    w = SampleWindow(clock)
    w.add(sample(5.0, at=10.0))
    w.add(sample(1.0, at=16.0))
    w.start_epoch(15.0)
    assert w.values("e2e") == [1.0]
    # A request dispatched at 12 under the old limit finishes now: not counted.
    assert w.add(sample(7.0, at=12.0)) is False
    assert w.add(sample(2.0, at=15.0)) is True
    assert w.values("e2e") == [1.0, 2.0]


def test_per_token_values() -> None:
    w = SampleWindow(FakeClock())
    w.add(sample(3.0, out=100))
    w.add(sample(0.5, out=0))  # an embedding: no output tokens
    assert w.per_token_values() == [0.03]


def test_e2e_with_the_time_each_sample_was_sent() -> None:
    w = SampleWindow(FakeClock())
    for at, e2e in [(2.0, 5.0), (0.0, 1.0), (1.0, 3.0)]:
        w.add(sample(e2e, at=at))
    assert sorted(w.by_dispatch("e2e")) == [(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]


def test_validation() -> None:
    with pytest.raises(ValueError, match="max_age"):
        SampleWindow(FakeClock(), max_age=0)
    with pytest.raises(ValueError, match="max_samples"):
        SampleWindow(FakeClock(), max_samples=0)


def test_newest_samples_only() -> None:
    w = SampleWindow(FakeClock())
    for v in (9.0, 8.0, 1.0, 2.0, 3.0):
        w.add(sample(v, ttft=v if v < 5 else None))
    assert w.values("e2e", newest=2) == [2.0, 3.0]
    assert w.quantile("e2e", 0.9, newest=3) == 3.0
    # `newest` counts samples that have the signal: the two newest TTFTs are 2 and 3.
    assert w.values("ttft", newest=2) == [2.0, 3.0]
    assert (w.quantile("ttft", 0.9, newest=10), w.quantile("e2e", 0.9, newest=10)) == (3.0, 9.0)


def test_sliding_max_keeps_the_largest_value_of_its_horizon() -> None:
    m = SlidingMax(horizon=10.0)
    assert m.value(0.0) is None
    m.add(0.0, 3)
    m.add(5.0, 1)
    assert m.value(9.0) == 3
    assert m.value(10.5) == 1  # the 3 is older than the horizon
    m.add(11.0, 2)
    assert m.value(16.0) == 2
    assert m.value(30.0) is None
