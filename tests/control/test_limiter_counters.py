from __future__ import annotations

from gateway.control.counters import CounterDelta


def test_first_reading_is_a_baseline_then_deltas_per_take() -> None:
    c = CounterDelta()
    c.observe(40.0)
    assert c.take() == 0.0
    c.observe(41.0)
    c.observe(43.0)
    assert c.take() == 3.0
    assert c.take() == 0.0


def test_a_restarted_engine_counts_from_zero() -> None:
    c = CounterDelta()
    c.observe(40.0)
    c.observe(2.0)
    assert c.take() == 2.0
    c.observe(5.0)
    assert c.take() == 3.0


def test_a_scrape_without_the_counter_keeps_the_baseline() -> None:
    c = CounterDelta()
    c.observe(None)
    c.observe(10.0)
    c.observe(None)
    c.observe(12.0)
    assert c.take() == 2.0
