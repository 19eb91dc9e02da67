"""When a limit's evidence is its own, as arithmetic on hand-built observations."""

from __future__ import annotations

from limits_helpers import ObsFactory

from gateway.control.algorithms.sla.settling import Settling


def test_settled_after_the_settle_or_the_epochs_median_e2e(obs: ObsFactory) -> None:
    s = Settling(2.0)
    tick = obs(limit=10, now=103.0, since_change=3.0, p50={"e2e": 4.0}, counts={"e2e": 20})
    s.observe(tick)
    assert s.in_force_for == 3.0 and s.settle(tick) == 4.0 and not s.settled(tick)
    later = obs(limit=10, now=105.0, since_change=5.0, p50={"e2e": 4.0}, counts={"e2e": 20})
    s.observe(later)
    assert s.settled(later) and s.turned_over(later)


def test_turned_over_waits_for_the_last_median_until_the_limit_has_its_own(obs: ObsFactory) -> None:
    # min_samples is 8: 8 s measured at 20, then a raise whose first 3 answers back read 1.5 s.
    s = Settling(2.0)
    s.observe(obs(limit=20, now=100.0, since_change=30.0, p50={"e2e": 8.0}, counts={"e2e": 50}))
    early = obs(limit=25, now=104.0, since_change=4.0, p50={"e2e": 1.5}, counts={"e2e": 3})
    s.observe(early)
    assert s.settled(early) and s.turnover(early) == 8.0 and not s.turned_over(early)
    own = obs(limit=25, now=105.0, since_change=5.0, p50={"e2e": 3.0}, counts={"e2e": 8})
    s.observe(own)
    assert s.turnover(own) == 3.0 and s.turned_over(own)


def test_a_cut_counts_from_when_it_took_effect(obs: ObsFactory) -> None:
    s = Settling(2.0)
    draining = obs(limit=5, peak_inflight=10, now=101.0, since_change=1.0, interval=1.0)
    s.observe(draining)
    assert s.in_force_for == 0.0 and not s.settled(draining)
