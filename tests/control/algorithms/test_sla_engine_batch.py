"""Whether a raise's batch rules out a gain, as arithmetic on hand-built observations."""

from __future__ import annotations

from limits_helpers import ObsFactory, engine_stats

from gateway.control.algorithms.sla.engine_batch import BatchSince
from gateway.control.algorithms.sla.ledger import Entry
from gateway.control.algorithms.sla.params import SLAParams
from gateway.types import Observation

P = SLAParams()  # settle 2 s, min_gain 0.03, hidden_share 0.5


def at_20() -> Entry:
    """20 measured: the engine ran 18 of its requests and counted every one of them."""
    e = Entry(20, 0.0, tokens=10_000.0, seconds=10.0)
    e.batch.add(1.0, 18.0, 10.0)
    e.outside.add(1.0, 0.0, 10.0)
    return e


def at_24(obs: ObsFactory, t: int, running: float, waiting: float, peak: int = 24) -> Observation:
    """The t-th tick since the raise to 24, with what the engine counted of its 24 requests."""
    stats = engine_stats(at=100.0 + t, running=running, waiting=waiting)
    return obs(
        limit=24,
        peak_inflight=peak,
        now=100.0 + t,
        since_change=float(t),
        interval=1.0,
        engine_stats=stats,
        outside_engine=stats.outside(24),
    )


def measure(obs: ObsFactory, ticks: int, running: float, waiting: float, peak: int = 24) -> BatchSince:
    b = BatchSince()
    for t in range(1, ticks + 1):
        b.observe(at_24(obs, t, running, waiting, peak), float(t), new_epoch=t == 1)
    return b


def test_a_raise_the_engine_queued_gained_nothing(obs: ObsFactory) -> None:
    why = measure(obs, 3, running=18.0, waiting=6.0).no_gain(24, at_20(), P)
    assert why is not None and "18.0 requests at 24, 18.0 at 20" in why


def test_a_raise_the_engine_ran_may_have_gained(obs: ObsFactory) -> None:
    assert measure(obs, 3, running=22.0, waiting=2.0).no_gain(24, at_20(), P) is None


def test_the_first_tick_in_force_and_under_the_settle_do_not_judge(obs: ObsFactory) -> None:
    # The first tick is skipped (the requests sent at the raise reach the engine's count within
    # it); one more second is under the 2-s settle.
    assert measure(obs, 2, running=18.0, waiting=6.0).no_gain(24, at_20(), P) is None


def test_requests_still_outside_the_engine_do_not_judge(obs: ObsFactory) -> None:
    # 4 of the 24 not yet counted: they may run once the front end lets them through.
    assert measure(obs, 4, running=18.0, waiting=2.0).no_gain(24, at_20(), P) is None


def test_a_count_with_others_traffic_in_it_is_not_read(obs: ObsFactory) -> None:
    # 30 running + waiting from 24 sent through the gateway: someone else's requests are counted.
    b = measure(obs, 4, running=18.0, waiting=12.0)
    assert b.seconds == 0.0 and b.no_gain(24, at_20(), P) is None


def test_a_new_epoch_starts_a_new_mean(obs: ObsFactory) -> None:
    b = measure(obs, 4, running=18.0, waiting=6.0)
    stats = engine_stats(at=110.0, running=24.0, waiting=0.0)
    b.observe(
        obs(limit=24, now=110.0, since_change=0.5, interval=1.0, engine_stats=stats, outside_engine=0.0),
        0.5,
        new_epoch=True,
    )
    assert b.seconds == 0.0
