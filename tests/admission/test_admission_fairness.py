"""FairQueue: strict priority, weighted fair shares between tenants, FIFO per tenant."""

from __future__ import annotations

from collections import Counter

import pytest

from gateway.admission.fairness import FairQueue


def drain(q: FairQueue[str], n: int | None = None) -> list[str]:
    out = []
    while q.depth and (n is None or len(out) < n):
        out.append(q.pop().item)
    return out


def test_priority_classes_are_strict_and_fifo_within_a_tenant() -> None:
    q: FairQueue[str] = FairQueue()
    for i in range(3):
        q.push(f"low{i}", "a", priority=0)
    q.push("high0", "b", priority=5)
    q.push("mid0", "a", priority=1)
    q.push("high1", "b", priority=5)
    assert drain(q) == ["high0", "high1", "mid0", "low0", "low1", "low2"]


def test_peek_names_what_pop_returns() -> None:
    q: FairQueue[str] = FairQueue({"a": 2.0})
    for i in range(20):
        q.push(f"a{i}", "a")
        q.push(f"b{i}", "b", priority=i % 2)
    while q.depth:
        peeked = q.peek()
        assert peeked is not None
        assert q.pop() is peeked


@pytest.mark.parametrize(("wa", "wb"), [(1.0, 1.0), (3.0, 1.0), (1.0, 4.0)])
def test_backlogged_tenants_share_dispatches_by_weight(wa: float, wb: float) -> None:
    q: FairQueue[str] = FairQueue({"a": wa, "b": wb})
    for i in range(200):
        q.push(f"a{i}", "a")
    for i in range(200):
        q.push(f"b{i}", "b")
    served = Counter(item[0] for item in drain(q, 100))
    expected_a = 100 * wa / (wa + wb)
    assert abs(served["a"] - expected_a) <= 1, served


def test_an_idle_tenant_banks_no_credit() -> None:
    q: FairQueue[str] = FairQueue()
    for i in range(40):
        q.push(f"a{i}", "a")
    assert Counter(x[0] for x in drain(q, 20)) == {"a": 20}
    for i in range(10):
        q.push(f"b{i}", "b")
    # b arrived late: it shares from now on, it is not owed the 20 dispatches it missed.
    assert Counter(x[0] for x in drain(q, 10)) == {"a": 5, "b": 5}


def test_a_tenant_sending_one_at_a_time_cannot_jump_a_backlog_forever() -> None:
    q: FairQueue[str] = FairQueue()
    for i in range(50):
        q.push(f"a{i}", "a")
    served = []
    q.push("b", "b")
    for _ in range(20):
        item = q.pop().item
        served.append(item[0])
        if item == "b":
            q.push("b", "b")  # b re-sends as soon as it is served
    assert Counter(served) == {"a": 10, "b": 10}


def test_removal_keeps_order_and_charges_nothing() -> None:
    q: FairQueue[str] = FairQueue()
    a = [q.push(f"a{i}", "a") for i in range(4)]
    [q.push(f"b{i}", "b") for i in range(4)]
    q.remove(a[0])  # a head leaves unserved: a keeps its turn
    q.remove(a[2])
    q.remove(a[2])  # twice is harmless
    assert q.depth == 6
    assert q.tenant_depths() == {"a": 2, "b": 4}
    assert drain(q) == ["a1", "b0", "a3", "b1", "b2", "b3"]
    assert q.tenant_depths() == {}


def test_newest_is_the_tail_of_the_lowest_class() -> None:
    q: FairQueue[str] = FairQueue()
    q.push("a-low-old", "a", priority=0)
    q.push("a-high", "a", priority=2)
    newest = q.push("a-low-new", "a", priority=0)
    assert q.newest("a") is newest
    q.remove(newest)
    found = q.newest("a")
    assert found is not None and found.item == "a-low-old"
    assert q.newest("nobody") is None


def test_ahead_of_new_counts_what_fair_order_serves_first() -> None:
    q: FairQueue[str] = FairQueue({"heavy": 1.0, "light": 1.0})
    for i in range(30):
        q.push(f"h{i}", "heavy")
    q.push("urgent", "x", priority=1)
    # A light tenant's first request waits for the higher class and about one of heavy's.
    assert q.ahead_of_new("light", 0) == pytest.approx(1 + 1)
    # Heavy's next one waits for its own 30 and the urgent one.
    assert q.ahead_of_new("heavy", 0) == pytest.approx(31)
    # Check the estimate against the real order.
    q.push("l0", "light")
    order = drain(q)
    assert order.index("l0") == 2


def test_weights_are_validated() -> None:
    with pytest.raises(ValueError, match="weight"):
        FairQueue({"a": 0.0})


def test_lane_ahead_is_the_next_entry_and_those_behind_it_in_its_lane() -> None:
    q: FairQueue[str] = FairQueue()
    for i in range(4):
        q.push(f"a{i}", "a")
        q.push(f"b{i}", "b")
    q.push("urgent", "b", priority=1)
    assert [e.item for e in q.lane_ahead(3)] == ["urgent"]
    q.pop()
    assert [e.item for e in q.lane_ahead(3)] == ["a0", "a1", "a2"]
    q.remove(q.lane_ahead(2)[1])
    assert [e.item for e in q.lane_ahead(3)] == ["a0", "a2", "a3"]


def test_serving_an_entry_behind_the_next_charges_its_tenant_as_for_the_next() -> None:
    q: FairQueue[str] = FairQueue()
    for i in range(3):
        q.push(f"a{i}", "a")
        q.push(f"b{i}", "b")
    skip = q.lane_ahead(3)[2]
    assert q.pop(skip).item == "a2"
    # b's turn now, exactly as if a0 had been served; a's own order is otherwise kept.
    assert drain(q) == ["b0", "a0", "b1", "a1", "b2"]
    q.push("x", "a")
    y = q.push("y", "b")
    assert [e.item for e in q.lane_ahead(2)] == ["x"]
    with pytest.raises(ValueError, match="whose turn"):
        q.pop(y)  # another tenant's: serving it would take a's turn
