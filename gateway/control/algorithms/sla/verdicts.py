"""What the `sla` controller reads from one observation and the ledger: which P90 is over target on
enough evidence and which P90s stand on evidence at all, what growth may act on, whether a rate is
clearly higher than another and a probe up is kept, how many requests in flight the engine does not
count (and how many it runs), and whether the last increase of the limit only went there.

Pure functions of their arguments.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from gateway.control.algorithms.base import quantile_exceeds, worst_ratio
from gateway.control.algorithms.sla.ledger import Entry, Reading
from gateway.control.algorithms.sla.params import SLAParams
from gateway.types import SLA, Observation, Signal


def over_target(obs: Observation, sla: SLA, alpha: float) -> tuple[Signal | None, float]:
    """The signal furthest over its target among those with the evidence to cut on.

    Evidence: so many values over the target that a P90 at the target would give them with
    probability below `alpha` (`quantile_exceeds`: 3 of 3, 7 of 20, 10 of 40; a P90 read from the
    backend's histogram, with no values behind it, stands on min_samples). A point P90 of 20 values
    reads over a target that the true P90 sits on about a third of the time, and it is read every
    tick: cutting on it cut limits that met the SLA on sampling noise.
    """

    def admit(signal: Signal, target: float) -> bool:
        values = obs.values.get(signal)
        if not values:
            return obs.counts.get(signal, 0) >= obs.min_samples
        return quantile_exceeds(values, target, 0.9, alpha)

    signal, ratio = worst_ratio(obs, sla, admit=admit)
    return (signal, ratio) if ratio > 1.0 else (None, ratio)


def readings(obs: Observation, sla: SLA, alpha: float) -> dict[Signal, Reading]:
    """Each SLA signal's P90 that stands on evidence: min_samples values, or values over the target
    so many that `over_target` would cut on them.

    Why every signal and not only the worst: a floor is a signal whose P90 does not fall as the limit
    falls (sla.floor), read along the limits where that signal was read; a stall that
    put TTFT furthest over target at one limit hid what TPOT read there.
    """
    found: dict[Signal, Reading] = {}
    for signal, target in sla.targets().items():
        p90, values = obs.p90.get(signal), obs.values.get(signal)
        if p90 is None or target <= 0:
            continue
        if obs.counts.get(signal, 0) >= obs.min_samples or (
            values and quantile_exceeds(values, target, 0.9, alpha)
        ):
            found[signal] = Reading(p90 / target, p90)
    return found


def evident(obs: Observation, sla: SLA) -> bool:
    """Whether some SLA signal is measured and each measured one stands on min_samples values."""
    measured = [s for s in sla.targets() if s in obs.p90]
    return bool(measured) and all(obs.counts.get(s, 0) >= obs.min_samples for s in measured)


COHORT_LEAST = 8
"""Requests a cohort needs before growth may stand on it (with none in flight its P90 is its largest)."""
COHORT_SHARE = 1.0 / 3.0
"""A cohort of fewer than min_samples stands for growth only with its P90 under this share of u x
the target."""


def cohort_p90(cohort: list[float], least: int) -> tuple[float, int] | None:
    """The nearest-rank P90 of the longest prefix of `cohort` (the requests sent first) with at least
    `least` values and a finite P90, reading those still in flight (infinite) as the slowest, and
    that prefix's length; None if no prefix has one.

    The P90 of n values is the ceil(0.9 n)-th smallest, finite while at most n - ceil(0.9 n) are in
    flight, and it bounds the prefix's P90 from above whatever those take.
    """
    infinite, longest, rank = 0, 0, 0
    for n, value in enumerate(cohort, start=1):
        infinite += value == math.inf
        at = max(1, math.ceil(0.9 * n))
        if n >= least and infinite <= n - at:
            longest, rank = n, at
    return (sorted(cohort[:longest])[rank - 1], longest) if longest else None


class Growth(NamedTuple):
    """What growth within target may act on."""

    ratio: float
    """The worst P90/target."""
    fits: int | None
    """The requests the KV cache holds, as far as one step toward the band may reach."""
    bounded: bool = False
    """It stands on upper bounds (`bounded_ratio`), which describe the limit however long it has
    been in force: no settle to wait for."""


def growth_evidence(obs: Observation, sla: SLA, r: float, u: float) -> Growth | None:
    """What growth may act on, or None while it has not the evidence.

    Every measured SLA signal on min_samples values (`evident`): r, and what the KV cache holds
    (`kv_fits`), bounded if `bounded_ratio` stands too. Else, on the cohorts (`bounded_ratio`):
    the larger of r and their worst ratio, and what the KV cache holds with every request at its
    full size (`fits_whole`) where that is fewer.
    Why: whole answers come slowly (20 of them at limit 8 took 14-17 s on a CPU engine), and the
    first to finish are the short ones: a P90 of fewer values finished so far read low after every
    raise. The requests sent first, with the unfinished ones at the top, are no such selection: their
    P90 is an upper bound whatever the slow ones take. The requests running by then are the first
    ones and those sent as they finished, younger than in steady state, so their KV footprint reads
    small and what the cache holds large (19 where 16 held in steady state, in virtual time); a
    request's full size bounds what it will hold.
    """
    if r >= u:
        return None
    if evident(obs, sla):
        return Growth(r, obs.kv_fits, bounded=bounded_ratio(obs, sla, u) is not None)
    if (bounded := bounded_ratio(obs, sla, u)) is not None:
        return Growth(max(r, bounded), fits_whole(obs), bounded=True)
    return None


def bounded_ratio(obs: Observation, sla: SLA, u: float) -> float | None:
    """The worst P90/target over the cohorts, if every SLA signal measured stands on one: per signal
    the burst's bounds (`Observation.bounds`) and then the epoch's requests in the order sent
    (`Observation.cohorts`), the P90 of the longest prefix that holds the whole burst and at least
    `COHORT_LEAST` values (`cohort_p90`), under u x the target on `min_samples` values or under
    COHORT_SHARE x u x the target on fewer; else None.

    A burst's bound is at least what its request would measure had it been sent once arrivals spread
    out, and a request in flight without a value reads as the slowest, so the P90 bounds the
    limit's from above: evidence that the limit has room, never that it has none (a cut reads the
    epoch's values alone, `over_target`), and it needs no settle. A prefix in the order sent leaves
    out the youngest requests for their age, not for their speed, so steady arrivals do not keep it
    from standing. A third of the band leaves room for the noise of a P90 on few values.
    """
    worst: float | None = None
    for signal, target in sla.targets().items():
        burst = obs.bounds.get(signal, [])
        cohort = burst + obs.cohorts.get(signal, [])
        if not cohort or target <= 0:
            if signal in obs.p90:
                return None  # measured, but not by requests of this epoch (the backend's histogram)
            continue
        found = cohort_p90(cohort, max(COHORT_LEAST, len(burst)))
        if found is None:
            return None
        p90, n = found
        band = u if n >= obs.min_samples else COHORT_SHARE * u
        if p90 >= band * target:
            return None
        worst = p90 / target if worst is None else max(worst, p90 / target)
    return worst


def fits_whole(obs: Observation) -> int | None:
    """What the KV cache holds (`kv_fits`), or holds with every request at its full size
    (`kv_fits_whole`) where that is fewer; None if neither is known. Before any request has
    finished (no `kv_fits_whole`), at most twice the limit: the requests running then have not
    reached their size, so what the cache seems to hold is more than it will (a fresh gateway's
    first 8 streams of 400 tokens read 25 where 17-19 held), and a slow start's doubling is the
    most that is safe without it."""
    whole = obs.kv_fits_whole
    if whole is None and obs.kv_fits is not None:
        whole = 2 * obs.limit
    return min((k for k in (obs.kv_fits, whole) if k is not None), default=None)


def gains(a: Entry, b: Entry, min_gain: float, z: float, *, good: bool) -> bool:
    """Whether `a` delivered more than (1 + min_gain) x `b`, by more than z x both counts' noise:
    in output tokens/s, or in goodput if `good` (`Entry.delivery`)."""
    (rate_a, sd_a), (rate_b, sd_b) = a.delivery(good), b.delivery(good)
    return rate_a - (1.0 + min_gain) * rate_b > z * math.hypot(sd_a, sd_b)


def probe_kept(
    here: Entry, start: Entry, p: SLAParams, more_time: bool, on_point: bool, *, good: bool
) -> bool | None:
    """Whether a probe from `start` to `here` is kept: yes on a gain beyond the noise, no on none
    within it; a gain the noise leaves open waits (None) while there is `more_time` to measure, then
    is decided by its point estimate if `on_point`, else undone. In goodput if `good`."""
    (rate, sd), (base, base_sd) = here.delivery(good), start.delivery(good)
    noise, bar = p.noise_z * math.hypot(sd, base_sd), (1.0 + p.min_gain) * base
    if rate - bar > noise:
        return True
    if rate + noise <= bar:
        return False
    if more_time:
        return None
    return on_point and rate > bar


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


def compare(a: Entry, b: Entry, *, good: bool) -> str:
    what = "good tok/s" if good else "tok/s"
    return f"{a.limit} delivered {a.delivery(good)[0]:.0f} {what}, {b.limit} {b.delivery(good)[0]:.0f} {what}"
