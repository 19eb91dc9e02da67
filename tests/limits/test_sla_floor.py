"""The proof of a latency floor along the limit, on hand-built ledger entries."""

from __future__ import annotations

from gateway.limits.ledger import Entry
from gateway.limits.sla_floor import along_the_limit


def entry(limit: int, ratio: float, p90: float) -> Entry:
    return Entry(limit, at=0.0, tokens=100.0, seconds=1.0, ratio=ratio, p90=p90)


def test_flat_latency_from_the_lowest_limit_up_is_a_floor() -> None:
    entries = [entry(5, 1.07, 0.016), entry(12, 1.05, 0.0158)]
    assert along_the_limit(entries, "tpot", 1, span=2.0) == {"tpot": 0.0158}


def test_one_steep_pair_is_enough_to_doubt_the_floor() -> None:
    # 12 was measured before the backend slowed down and looks as slow as 5 after it; 10, measured
    # after, shows latency rising with the limit: the line through 5 and 10 is under 1 at the floor.
    entries = [entry(5, 1.07, 0.016), entry(10, 1.85, 0.028), entry(12, 1.05, 0.0158)]
    assert along_the_limit(entries, "tpot", 1, span=2.0) is None


def test_limits_closer_than_the_span_prove_nothing() -> None:
    assert along_the_limit([entry(5, 1.5, 0.02), entry(9, 1.5, 0.02)], "tpot", 1, span=2.0) is None
    assert along_the_limit([entry(1, 1.5, 0.02)], "tpot", 1, span=2.0) == {"tpot": 0.02}
