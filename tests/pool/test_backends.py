"""A backend's rotation, passive ejection, room and lease, with a hand-driven clock and real limiters."""

import logging

import pytest

from gateway.config import BackendConfig, HealthConfig
from gateway.control import algorithms
from gateway.control.limiter import Limiter
from gateway.pool.backends import Backend
from gateway.pool.pool import Pool
from gateway.types import SLA, EngineStats, Sample
from tests.clock import FakeClock
from tests.pool.pool_helpers import take


def make(clock: FakeClock, name: str, limit: int, models: tuple[str, ...] = ("m",)) -> Backend:
    algorithm = algorithms.create("fixed", {"limit": limit}, SLA(ttft_p90=1.0))
    limiter = Limiter(algorithm, clock=clock, floor=1, max_limit=64)
    backend = Backend(
        BackendConfig(url=f"http://{name}", name=name, models=models),
        limiter,
        HealthConfig(failure_threshold=2, backoff_initial=1.0, backoff_max=4.0),
        clock,
    )
    backend.mark_healthy()
    return backend


def test_consecutive_failures_eject_with_growing_backoff() -> None:
    clock = FakeClock(100.0)
    a = make(clock, "a", 4)
    pool = Pool([a], clock)
    assert not a.record_failure("refused")
    assert a.record_failure("refused")
    assert not pool.available("m") and take(pool, "m") is None
    a.mark_healthy()
    assert not a.in_rotation(clock.now)  # the backoff has not run out yet
    clock.advance(1.0)
    assert pool.available("m")
    a.record_failure("x")
    a.record_failure("x")
    a.mark_healthy()
    clock.now += 1.5
    assert not pool.available("m")  # second ejection waits twice as long
    clock.now += 0.5
    assert pool.available("m")
    a.record_success()
    assert a.ejections == 0


def test_failures_while_out_of_rotation_do_not_extend_the_backoff() -> None:
    clock = FakeClock(100.0)
    a = make(clock, "a", 4)
    a.record_failure("x")
    assert a.record_failure("x")  # ejected for 1 s
    for _ in range(10):  # its broken in-flight streams report in afterwards
        assert not a.record_failure("stream cut")
    a.mark_healthy()
    clock.advance(1.0)
    assert a.in_rotation(clock.now)
    assert a.last_error == "stream cut"


def test_ejection_and_a_restart_move_the_cache_epoch() -> None:
    clock = FakeClock(100.0)
    a = make(clock, "a", 4)
    a.observe_prefix_cache(100.0, 60.0, restarted=False)
    assert (a.prefix_queries, a.prefix_hits, a.cache_epoch) == (100.0, 60.0, 0)
    a.observe_prefix_cache(10.0, 0.0, restarted=True)
    assert (a.prefix_queries, a.cache_epoch) == (110.0, 1)
    a.record_failure("refused")
    assert a.cache_epoch == 1
    a.record_failure("refused")  # ejected
    assert a.cache_epoch == 2


def make_with_horizon(clock: FakeClock, limit: int, horizon: float) -> Backend:
    algorithm = algorithms.create("fixed", {"limit": limit}, SLA(ttft_p90=1.0))
    limiter = Limiter(algorithm, clock=clock, floor=1, max_limit=64)
    backend = Backend(
        BackendConfig(url="http://a", name="a", models=("m",)),
        limiter,
        HealthConfig(),
        clock,
        interactive_horizon=horizon,
    )
    backend.mark_healthy()
    return backend


def test_batch_lines_leave_the_slots_interactive_traffic_used_lately() -> None:
    clock = FakeClock(100.0)
    a = make_with_horizon(clock, 6, horizon=10.0)
    pool = Pool([a], clock)
    interactive = [take(pool, "m") for _ in range(2)]
    for lease in interactive:
        lease.release(None)  # type: ignore[union-attr]
    clock.advance(1.0)
    batch = [take(pool, "m", background=True) for _ in range(6)]
    assert sum(lease is not None for lease in batch) == 4  # 6 less the 2 interactive ones had
    assert a.background_inflight == 4
    assert take(pool, "m") is not None  # the reserve is there for an interactive arrival
    clock.advance(11.0)  # the peak is forgotten (horizon 10 s, rolled in within 1 s); 5 held of 6
    extra = take(pool, "m", background=True)
    assert extra is not None and a.background_inflight == 5
    for lease in [*batch, extra]:
        if lease is not None:
            lease.release(None)
    assert a.background_inflight == 0 and a.limiter.inflight == 1


def test_interactive_traffic_may_use_every_slot_batch_lines_leave() -> None:
    clock = FakeClock(100.0)
    a = make_with_horizon(clock, 3, horizon=10.0)
    pool = Pool([a], clock)
    batch = take(pool, "m", background=True)
    assert batch is not None
    interactive = [take(pool, "m") for _ in range(3)]
    assert sum(lease is not None for lease in interactive) == 2  # the limit binds everyone
    assert take(pool, "m", background=True) is None


def test_beside_interactive_traffic_batch_lines_stay_within_what_the_kv_cache_holds() -> None:
    clock = FakeClock(100.0)
    a = make_with_horizon(clock, 10, horizon=10.0)
    pool = Pool([a], clock)
    # 1,000 KV tokens, 80% used by 4 running sequences: 200 tokens each, so 5 fit.
    a.limiter.observe(EngineStats(at=clock(), kv_usage=0.8, running=4, kv_capacity_tokens=1000))
    assert a.limiter.kv_ceiling() == 5 and a.limiter.limit == 10
    alone = [take(pool, "m", background=True) for _ in range(10)]
    assert all(lease is not None for lease in alone)  # no interactive traffic: up to the limit
    for lease in alone:
        lease.release(None)  # type: ignore[union-attr]
    interactive = take(pool, "m")
    assert interactive is not None
    batch = [take(pool, "m", background=True) for _ in range(8)]
    assert sum(lease is not None for lease in batch) == 4  # the KV ceiling less the reserve of 1
    assert sum(take(pool, "m") is not None for _ in range(8)) == 5  # interactive: the limit


def test_beside_interactive_traffic_batch_lines_fit_the_kv_cache_at_their_full_size() -> None:
    clock = FakeClock(100.0)
    a = make_with_horizon(clock, 10, horizon=10.0)
    pool = Pool([a], clock)
    # 1,000 KV tokens, half used by 4 running sequences (125 each, so 8 fit as they are now); a
    # request ends holding 250 (prompt + output), so only 4 fit once they have all grown.
    a.limiter.observe(EngineStats(at=clock(), kv_usage=0.5, running=4, kv_capacity_tokens=1000))
    first = take(pool, "m")
    assert first is not None
    first.release(Sample(dispatched_at=clock(), e2e=1.0, prompt_tokens=150, output_tokens=100))
    assert (a.limiter.kv_ceiling(), a.limiter.whole_request_ceiling()) == (8, 4)
    interactive = take(pool, "m")
    assert interactive is not None
    batch = [take(pool, "m", background=True) for _ in range(8)]
    assert sum(lease is not None for lease in batch) == 3  # 4 at full size less the reserve of 1
    assert sum(take(pool, "m") is not None for _ in range(8)) == 6  # interactive: the limit


def test_the_last_backend_of_a_model_is_kept_when_ejecting_is_not_allowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(100.0)
    a, b = make(clock, "a", 4, ("m", "solo")), make(clock, "b", 4, ("m",))
    pool = Pool([a, b], clock)
    assert pool.last_in_rotation(a) and not pool.last_in_rotation(b)  # only a serves "solo"
    for _ in range(5):
        assert not a.record_failure("answered 500", may_eject=False)
    assert a.in_rotation(clock.now) and a.consecutive_failures == 5
    assert not caplog.records
    a.record_success()
    b.record_failure("refused")
    with caplog.at_level(logging.WARNING, logger="gateway.pool.backends"):
        assert b.record_failure("refused")  # ejections are logged with their cause
    assert "backend b out of rotation for 1.0 s after 2 consecutive failures; last: refused" in caplog.text
    assert pool.last_in_rotation(a)


class HandOffs:
    """The pool's hand-off as the admission queues take it: which backend offered a freed slot."""

    def __init__(self) -> None:
        self.offered: list[str] = []

    def __call__(self, backend: Backend) -> None:
        self.offered.append(backend.name)


def test_a_released_lease_hands_its_slot_to_the_waiters_once() -> None:
    clock = FakeClock(100.0)
    a = make(clock, "a", 2)
    pool = Pool([a], clock)
    pool.hand_off = hand_offs = HandOffs()
    lease = take(pool, "m")
    assert lease is not None and hand_offs.offered == []
    lease.release(None)
    assert hand_offs.offered == ["a"] and a.limiter.inflight == 0
    with pytest.raises(RuntimeError, match="twice"):
        lease.release(None)
    assert a.limiter.inflight == 0


def test_no_hand_off_while_releases_leave_the_count_over_a_cut() -> None:
    clock = FakeClock(100.0)
    a = make(clock, "a", 8)
    pool = Pool([a], clock)
    pool.hand_off = hand_offs = HandOffs()
    held = [take(pool, "m") for _ in range(7)]
    a.limiter.adopt(4)  # a cut while 7 are in flight
    for lease in held[:3]:
        lease.release(None)  # type: ignore[union-attr]
    assert hand_offs.offered == [] and a.limiter.inflight == 4
    held[3].release(None)  # type: ignore[union-attr]
    assert hand_offs.offered == ["a"]


def test_a_slot_is_handed_off_even_when_recording_its_request_fails() -> None:
    clock = FakeClock(100.0)
    a = make(clock, "a", 1)
    pool = Pool([a], clock)
    pool.hand_off = hand_offs = HandOffs()
    lease = take(pool, "m")
    assert lease is not None

    def broken(sample: Sample) -> None:
        raise ValueError("broken receiver")

    a.limiter.on_sample = broken
    with pytest.raises(ValueError, match="broken receiver"):
        lease.release(Sample(dispatched_at=clock.now, e2e=1.0))
    assert hand_offs.offered == ["a"] and a.limiter.has_room()
