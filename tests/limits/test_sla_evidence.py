"""Whether the `sla` controller keeps a probe up, as arithmetic on ledger entries."""

from __future__ import annotations

import pytest

from gateway.limits.ledger import Entry
from gateway.limits.sla_evidence import probe_kept
from gateway.limits.sla_params import SLAParams

P = SLAParams()  # min_gain 0.03, noise_z 2


def answers(limit: int, rate: float, finished: float) -> Entry:
    """`finished` whole answers over 10 s that delivered `rate` tokens/s (noise 1 / sqrt(finished))."""
    return Entry(limit, 0.0, tokens=10 * rate, seconds=10.0, finished=finished, lumped=10 * rate)


def streamed(limit: int, rate: float) -> Entry:
    return Entry(limit, 0.0, tokens=10 * rate, seconds=10.0, finished=50.0)


def test_streamed_tokens_decide_at_once_on_the_minimum_gain() -> None:
    assert probe_kept(streamed(24, 1040.0), streamed(18, 1000.0), P, True, False) is True
    assert probe_kept(streamed(24, 1020.0), streamed(18, 1000.0), P, True, True) is False


@pytest.mark.parametrize(
    ("rate", "more_time", "on_point", "kept"),
    [
        # 400 answers each: noise 5% a rate, 2 x hypot = 14%; a 20% gain is beyond it.
        (1200.0, False, False, True),
        # A gain the noise cannot exclude waits while there is time ...
        (1080.0, True, True, None),
        # ... then the point estimate decides the throughput climb ...
        (1080.0, False, True, True),
        (1020.0, False, True, False),
        # ... and a raise within target, which the SLA does not need, is undone.
        (1080.0, False, False, False),
        # A loss the noise cannot hide is undone at once.
        (800.0, True, True, False),
    ],
)
def test_whole_answers_wait_for_the_noise(
    rate: float, more_time: bool, on_point: bool, kept: bool | None
) -> None:
    assert probe_kept(answers(24, rate, 400.0), answers(18, 1000.0, 400.0), P, more_time, on_point) is kept
