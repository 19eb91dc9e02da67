"""The `goodput` controller's model: how long a failed limit is kept from (exponential backoff), and
which of the engine's queue is the limit's own."""

from __future__ import annotations

from limits_helpers import engine_stats, make_obs

from gateway.control.algorithms.goodput.model import Epoch, Model

MEMORY = 20.0


def remembered_for(model: Model, limit: int, now: float, *, at: int = 9, r: float = 1.0) -> float:
    """Fail `limit` at `now`; the seconds until a tick at limit `at` (P90/target `r`) forgets it."""
    model.fail(limit, 1.5, now, MEMORY)
    t = now
    while model.failed(make_obs(limit=at, now=t), r) is not None:
        t += 1.0
    return t - now


def test_a_limit_that_fails_again_in_a_row_is_kept_from_twice_as_long() -> None:
    model = Model()
    spans = [remembered_for(model, 10, now) for now in (0.0, 100.0, 300.0, 700.0)]
    assert spans == [MEMORY, 2 * MEMORY, 4 * MEMORY, 8 * MEMORY]


def test_the_backoff_ends_where_the_limit_meets_the_sla() -> None:
    model = Model()
    remembered_for(model, 10, 0.0)
    assert remembered_for(model, 10, 100.0) == 2 * MEMORY
    model.met(9)  # below the failed limit: says nothing of it
    assert remembered_for(model, 10, 200.0) == 4 * MEMORY
    model.met(10)
    assert remembered_for(model, 10, 300.0) == MEMORY


def test_a_lower_limit_failing_is_news_and_starts_afresh() -> None:
    model = Model()
    remembered_for(model, 10, 0.0)
    assert remembered_for(model, 6, 100.0, at=5) == MEMORY


def test_latency_that_shows_the_limit_would_meet_forgets_it_and_its_backoff() -> None:
    model = Model()
    remembered_for(model, 10, 0.0)
    # At 9 the P90 is 0.8 of the target: at 10 at most 0.8 x 10 / 9 < 1 (Little's law).
    assert remembered_for(model, 10, 100.0, r=0.8) == 0.0
    assert remembered_for(model, 10, 200.0) == MEMORY


def test_a_probe_that_gained_nothing_is_not_undone_by_meeting_the_sla() -> None:
    model = Model()
    model.fail(12, 1.0, 0.0, MEMORY)  # no gain: a throughput failure, not a latency one
    model.met(12)
    assert remembered_for(model, 12, 100.0, at=10) == 2 * MEMORY


def test_the_engine_queue_of_a_burst_over_the_limit_is_not_the_limits() -> None:
    # A fresh gateway's burst of 256 at a limit of 8: the engine queues 68 of them for a second
    # while it prefills the rest. That says nothing of what 8 in flight queue; 8 in flight then
    # queued none.
    epoch = Epoch(8, 0.0)
    epoch.add(make_obs(limit=8, now=1.0, peak_inflight=256, engine_stats=engine_stats(waiting=68)), 0.0)
    assert epoch.queue == 0.0
    for t in (2.0, 3.0):
        epoch.add(make_obs(limit=8, now=t, peak_inflight=8, engine_stats=engine_stats(waiting=0)), 0.0)
    assert epoch.queue == 0.0
    # Within the limit, the engine's queue of our requests is the limit's own.
    epoch.add(make_obs(limit=8, now=4.0, peak_inflight=8, engine_stats=engine_stats(waiting=3)), 0.0)
    assert epoch.queue == 1.0
