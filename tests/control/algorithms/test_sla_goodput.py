"""Which raises the `sla` controller judges on goodput, as arithmetic on ledger entries."""

from __future__ import annotations

from gateway.control.algorithms.sla.goodput import judged_raise
from gateway.control.algorithms.sla.ledger import Entry
from gateway.control.algorithms.sla.params import SLAParams

P = SLAParams()  # min_met 0.9


def entry(limit: int, answered: float, missed: float) -> Entry:
    return Entry(limit, 0.0, tokens=1000.0, seconds=1.0, answered=answered, missed=missed)


def test_a_raise_is_judged_from_j_or_into_a_limit_where_the_output_missed() -> None:
    fresh = [entry(10, 1000.0, 0.0), entry(13, 1000.0, 200.0)]
    assert judged_raise(12, 2, 12, fresh, P) == "past what the KV cache holds"
    # 12 -> 14 reaches 13, where a fifth of the output missed; 10 -> 12 reaches nothing measured.
    assert judged_raise(12, 2, None, fresh, P) == "to where the output missed targets"
    assert judged_raise(10, 2, None, fresh, P) is None
    # 9 -> 10 reaches 10, where all of it met.
    assert judged_raise(9, 1, 20, fresh, P) is None
