"""Probes up, judged against where they started, and the throughput climb, on hand-built ticks."""

from __future__ import annotations

from limits_helpers import ObsFactory

from gateway.control.algorithms.sla.engine_batch import BatchSince
from gateway.control.algorithms.sla.ledger import Ledger
from gateway.control.algorithms.sla.params import SLAParams
from gateway.control.algorithms.sla.probe import Probes
from gateway.control.algorithms.sla.settling import Settling
from gateway.types import Decision, Direction, Observation


class Rig:
    """Probes with the ledger, settling and batch they read, fed as the `sla` controller feeds them."""

    def __init__(self, obs: ObsFactory, **params: float) -> None:
        self._obs = obs
        p = SLAParams(**params)  # type: ignore[arg-type]
        self.ledger = Ledger(p.half_life, p.memory)
        self.settling = Settling(p.settle)
        self.batch = BatchSince()
        self.probes = Probes(p, self.ledger, self.settling, self.batch)
        self.now, self.limit, self.changed = 100.0, 10, 90.0

    def tick(
        self, rate: float, whole: bool = False, running: float | None = None, **kw: object
    ) -> Observation:
        """One second at the current limit delivering `rate` tokens, as whole answers of 200 if
        `whole`; the engine ran `running` of the requests (and held none outside) if given."""
        self.now += 1.0
        o = self._obs(
            limit=self.limit,
            now=self.now,
            interval=1.0,
            since_change=self.now - self.changed,
            delivered_tokens=rate,
            lumped_tokens=rate if whole else 0.0,
            finished=round(rate / 200) if whole else 0,
            **kw,
        )
        self.settling.observe(o)
        self.batch.observe(o, self.settling.in_force_for, self.settling.new_epoch)
        if self.settling.turned_over(o):
            hidden = None if running is None else 0.0
            self.ledger.record_rate(
                o.now,
                o.limit,
                rate,
                1.0,
                finished=o.finished,
                lumped=o.lumped_tokens,
                hidden=hidden,
                running=running,
            )
        return o

    def hold(self, rate: float, seconds: int = 10, whole: bool = False) -> None:
        """Measure the current limit for `seconds`."""
        for _ in range(seconds):
            self.tick(rate, whole)

    def move(self, d: Decision) -> Decision:
        if d.limit != self.limit:
            self.limit, self.changed = d.limit, self.now
        return d

    def climb(self, rate: float, whole: bool = False, running: float | None = None, **kw: object) -> Decision:
        return self.move(self.probes.climb(self.tick(rate, whole, running, **kw)))

    def judge(self, rate: float, whole: bool = False) -> Decision:
        return self.move(self.probes.judge(self.tick(rate, whole)))


def climb_until_moved(rig: Rig, rate: float, seconds: int = 30, **kw: object) -> Decision:
    """The throughput climb's first move from the current limit, measured first if never measured."""
    start = rig.limit
    if rig.ledger.get(start) is None:
        rig.hold(rate, whole=bool(kw.get("whole")))
    for _ in range(seconds):
        d = rig.climb(rate, **kw)
        if d.limit != start:
            return d
    raise AssertionError(f"still at {start}")


def test_a_step_that_gained_in_proportion_is_kept_and_doubles_the_next(obs: ObsFactory) -> None:
    rig = Rig(obs)
    d = climb_until_moved(rig, 1000.0)
    assert (d.limit, d.reason) == (15, "probe")  # 10 + 0.5 x 10
    # 15 delivers half as much again: kept once measured for `probe_dwell`, and the next step is
    # twice this one's 5.
    d = climb_until_moved(rig, 1500.0)
    assert (d.limit, d.reason) == (25, "probe")


def test_a_step_with_a_small_gain_is_kept_without_doubling_the_next(obs: ObsFactory) -> None:
    rig = Rig(obs)
    climb_until_moved(rig, 1000.0)
    d = climb_until_moved(rig, 1100.0)  # 10% more for 50% more in flight
    assert (d.limit, d.reason) == (23, "probe")  # 15 + 0.5 x 15


def test_a_step_that_delivered_less_goes_back_and_waits_before_the_next(obs: ObsFactory) -> None:
    rig = Rig(obs, probe_every=10.0)
    climb_until_moved(rig, 1000.0)
    d = climb_until_moved(rig, 900.0)
    assert (d.limit, d.reason) == (10, "no_gain")
    undone_at = rig.now
    d = climb_until_moved(rig, 1000.0)
    assert d.reason == "probe" and rig.now - undone_at >= 10.0


def test_the_climb_jumps_to_what_the_kv_cache_holds(obs: ObsFactory) -> None:
    rig = Rig(obs)
    d = climb_until_moved(rig, 1000.0, kv_fits=30)
    assert (d.limit, d.reason) == (30, "probe") and "KV cache" in d.detail


def gain_within_the_noise(rig: Rig, within: bool) -> list[Decision]:
    """Whole answers, 5 a second of 200 tokens at 10, then 4% more at 15: a throughput step, or a
    raise `within` target."""
    rig.hold(1000.0, whole=True)
    if within:
        rig.probes.within(10)
        rig.move(Decision(15, Direction.UP, "probe", ""))
    else:
        climb_until_moved(rig, 1000.0, whole=True)
    assert rig.limit == 15
    seen = [rig.judge(1040.0, whole=True)]
    while seen[-1].reason == "probing" and len(seen) < 30:
        seen.append(rig.judge(1040.0, whole=True))
    return seen


def test_a_throughput_step_whose_gain_is_within_the_noise_is_decided_on_its_point_estimate(
    obs: ObsFactory,
) -> None:
    seen = gain_within_the_noise(Rig(obs), within=False)
    # Measured once its requests turned over (2 s) and for `probe_dwell` (4 s), then longer while
    # the gain is within the noise, up to `probe_every` (10 s).
    assert len(seen) > 11 and (seen[-1].limit, seen[-1].reason) == (15, "probe")


def test_a_raise_within_target_whose_gain_is_within_the_noise_is_undone(obs: ObsFactory) -> None:
    seen = gain_within_the_noise(Rig(obs), within=True)
    assert len(seen) > 11 and (seen[-1].limit, seen[-1].reason) == (10, "no_gain")


def test_the_climb_comes_down_to_the_batch_the_engine_ran_and_stays_where_it_delivered_as_much(
    obs: ObsFactory,
) -> None:
    # At 56 the engine ran 32 and held 24 in its queue: the climb tries 32, keeps it where it
    # delivered as much, and goes back to 56 where it delivered clearly less.
    for rate_at_32, ends in [(900.0, 32), (600.0, 56)]:
        rig = Rig(obs)
        rig.limit = 56
        for _ in range(10):
            rig.tick(900.0, running=32.0)
        d = rig.climb(900.0, running=32.0)
        assert (d.limit, d.reason) == (32, "probe") and "24 of 56 waiting" in d.detail
        d = next(d for _ in range(20) if (d := rig.climb(rate_at_32, running=32.0)).reason != "probing")
        assert d.limit == ends
