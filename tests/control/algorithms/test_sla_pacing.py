"""The wait between the `sla` controller's probes, as arithmetic on the time."""

from __future__ import annotations

from gateway.control.algorithms.sla.pacing import ProbePacing


def test_each_probe_undone_doubles_the_wait_up_to_the_longest() -> None:
    pacing = ProbePacing(every=10.0, longest=15.0)
    assert pacing.due(0.0)
    pacing.failed(100.0)
    assert not pacing.due(109.9) and pacing.due(110.0)
    pacing.failed(110.0)  # a second in a row waits 15, not 20: the longest
    assert not pacing.due(124.9) and pacing.due(125.0)


def test_a_probe_that_held_starts_the_count_again() -> None:
    pacing = ProbePacing(every=10.0, longest=60.0)
    pacing.failed(100.0)
    pacing.failed(110.0)
    assert not pacing.due(129.9)
    pacing.held()
    pacing.failed(130.0)
    assert pacing.due(140.0)


def test_a_higher_limit_that_delivered_less_waits_every() -> None:
    pacing = ProbePacing(every=10.0, longest=60.0)
    pacing.wait_from(100.0)
    assert not pacing.due(109.9) and pacing.due(110.0)
