"""What the `sla` controller reads from one observation and the ledger: which P90 is over target on
enough evidence, whether a rate is clearly higher than another and a probe up is kept, how many
requests in flight the engine does not count (and how many it runs), and whether the last increase
of the limit only went there.

Pure functions of their arguments.
"""

from __future__ import annotations

import math

from gateway.limits.base import quantile_exceeds, worst_ratio
from gateway.limits.ledger import Entry
from gateway.limits.sla_params import SLAParams
from gateway.types import SLA, Observation, Signal


def over_target(obs: Observation, sla: SLA, alpha: float) -> tuple[Signal | None, float]:
    """The signal furthest over its target among those with the evidence to cut on.

    Evidence: so many values over the target that a P90 at the target would give them with
    probability below `alpha` (a P90 read from the backend's histogram, with no values behind it,
    stands on min_samples).
    """

    def admit(signal: Signal, target: float) -> bool:
        values = obs.values.get(signal)
        if not values:
            return obs.counts.get(signal, 0) >= obs.min_samples
        return quantile_exceeds(values, target, 0.9, alpha)

    signal, ratio = worst_ratio(obs, sla, admit=admit)
    return (signal, ratio) if ratio > 1.0 else (None, ratio)


def evident(obs: Observation, sla: SLA) -> bool:
    """Whether some SLA signal is measured and each measured one stands on min_samples values."""
    measured = [s for s in sla.targets() if s in obs.p90]
    return bool(measured) and all(obs.counts.get(s, 0) >= obs.min_samples for s in measured)


def gains(a: Entry, b: Entry, min_gain: float, z: float) -> bool:
    """Whether `a` delivered more than (1 + min_gain) x `b`, by more than z x both counts' noise."""
    noise = math.hypot(a.rate * a.noise, b.rate * b.noise)
    return a.rate - (1.0 + min_gain) * b.rate > z * noise


def probe_kept(here: Entry, start: Entry, p: SLAParams, more_time: bool, on_point: bool) -> bool | None:
    """Whether a probe from `start` to `here` is kept: yes on a gain beyond the noise, no on none
    within it; a gain the noise leaves open waits (None) while there is `more_time` to measure, then
    is decided by its point estimate if `on_point`, else undone."""
    if gains(here, start, p.min_gain, p.noise_z):
        return True
    noise = p.noise_z * math.hypot(here.rate * here.noise, start.rate * start.noise)
    if here.rate + noise <= (1.0 + p.min_gain) * start.rate:
        return False
    if more_time:
        return None
    return on_point and here.rate > (1.0 + p.min_gain) * start.rate


def hidden(obs: Observation) -> float | None:
    """Requests in flight through the gateway that the engine counts neither running nor waiting."""
    stats = obs.engine_stats
    if stats is None or not stats.fresh(obs.now, obs.interval):
        return None
    return obs.outside_engine


def engine_batch(obs: Observation) -> tuple[float, float] | None:
    """The requests the engine ran and those in flight that it counted neither running nor waiting,
    if a fresh scrape counted only requests sent through the gateway (running + waiting at most the
    peak in flight); else None, since others' traffic would be in the count."""
    stats, outside = obs.engine_stats, hidden(obs)
    if stats is None or outside is None or stats.running is None or not stats.counts_only(obs.peak_inflight):
        return None
    return stats.running, outside


def held_outside(
    fresh: list[Entry], limit: int, share: float, min_gain: float, current: float | None
) -> str | None:
    """Why raising `limit` would only lengthen a queue outside the engine, or None.

    So when, from the next lower measured limit to this one, the requests the engine does not
    count grew by more than max(1, share x the increase), both on the mean at `limit` and in the
    `current` reading (if there is one), and the rate did not rise by min_gain: the extra requests
    wait outside and deliver nothing. A gap that grows while the rate rises is a front end that
    holds requests on their way in, which a higher limit keeps busy. The current reading must show
    it too because the mean decays over a half-life: a front end that stalled for a second (the
    engine counting none of the requests in flight) would otherwise stop growth for ten.
    """
    here = [e for e in fresh if e.limit == limit and e.hidden is not None]
    lower = [e for e in fresh if e.limit < limit and e.hidden is not None]
    if not here or not lower:
        return None
    base = lower[-1]
    assert here[0].hidden is not None and base.hidden is not None
    grew = here[0].hidden - base.hidden
    least = max(1.0, share * (limit - base.limit))
    if grew <= least or (current is not None and current - base.hidden <= least):
        return None
    if here[0].rate > (1.0 + min_gain) * base.rate:
        return None
    return f"{grew:.1f} of the last {limit - base.limit} more in flight are held outside the engine"


def compare(a: Entry, b: Entry) -> str:
    return f"{a.limit} delivered {a.rate:.0f} tok/s, {b.limit} {b.rate:.0f} tok/s"
