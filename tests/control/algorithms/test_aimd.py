from __future__ import annotations

from limits_helpers import ObsFactory

from gateway.control.algorithms import create
from gateway.types import SLA, Direction

SLA_E2E = SLA(e2e_p90=10.0)


def test_additive_increase_while_binding_and_under_target(obs: ObsFactory) -> None:
    a = create("aimd", {}, SLA_E2E)
    d = a.update(obs(limit=10, p90={"e2e": 9.9}))
    assert (d.limit, d.reason) == (11, "headroom")
    d = a.update(obs(limit=10, peak_inflight=3, p90={"e2e": 1.0}))
    assert (d.limit, d.reason) == (10, "not_binding")


def test_backoff_does_not_depend_on_overshoot(obs: ObsFactory) -> None:
    a = create("aimd", {"backoff": 0.5}, SLA_E2E)
    assert a.update(obs(limit=20, p90={"e2e": 10.5})).limit == 10
    assert a.update(obs(limit=20, p90={"e2e": 100.0})).limit == 10


def test_backoff_moves_at_least_one(obs: ObsFactory) -> None:
    a = create("aimd", {"backoff": 0.95}, SLA_E2E)
    # 5 * 0.95 = 4.75 -> 4.
    assert a.update(obs(limit=5, p90={"e2e": 11.0})).limit == 4
    assert a.update(obs(limit=2, p90={"e2e": 11.0})).limit == 1


def test_preemptions_back_off_without_samples(obs: ObsFactory) -> None:
    a = create("aimd", {}, SLA_E2E)
    d = a.update(obs(limit=20, sample_count=0, preemptions_delta=2))
    assert (d.limit, d.reason) == (18, "preemptions")


def test_insufficient_samples(obs: ObsFactory) -> None:
    a = create("aimd", {"increase": 2}, SLA_E2E)
    d = a.update(obs(limit=20, sample_count=3, p90={"e2e": 50.0}))
    assert (d.direction, d.reason) == (Direction.HOLD, "insufficient_samples")
    assert a.update(obs(limit=20, p90={"e2e": 1.0})).limit == 22


def test_clamp(obs: ObsFactory) -> None:
    a = create("aimd", {}, SLA_E2E)
    assert a.update(obs(limit=1, p90={"e2e": 99.0})).limit == 1
    assert a.update(obs(limit=32, ceiling=32, p90={"e2e": 1.0})).reason == "at_ceiling"
