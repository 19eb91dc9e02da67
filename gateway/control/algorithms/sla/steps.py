"""How far the `sla` controller moves its limit: pure functions of the ledger, the parameters and
the observation.

    over target, a lower L' measured with r' < r:  L - (r - 1)(L - L') / (r - r'), the secant to r = 1,
                                                    if (r - r') / (L - L') <= STEEPEST x r / L or L > K
    over target, r <= 1 + 2p:                       max(L / r, L - max(1, p L)), one step back
    over target, otherwise:                         L / r;  every cut at least 1, at most m L
    within target, under J, no knee known:  step = max(p L, min(room, max(ceil(sqrt L), K - L)))
    within target, from J on or near a knee:  step = max(1, min(room, max(s, p L))), below the knee
                                   (or into it, the next limit up, once its reading is
                                   `probe_every` old); s: the slow start's step after a probe that
                                   gained in proportion, else 0
    within target, below J:        either step, not past J
    room:                          the rise that would bring P90/target r to u, with P90 growing
                                   as sqrt(L) up to K, floor(L ((u / r)^2 - 1)) at most K - L,
                                   and as L beyond it, floor(L (u / r - 1)); the larger of the two
    infeasible, K above the step:  straight to K, the requests the KV cache holds (kv_fits)
    J = ceil(`judged_past_kv` x min(K, W)) + O:  from here a raise is a throughput probe, kept on a
                                   measured gain (W: what the KV cache holds with every request at
                                   its full size; O: the mean requests in flight at L that the
                                   engine does not hold)
    K in growth is the one its evidence gives (sla.verdicts.growth_evidence: fewer before min_samples)

Why: a cut aims at the limit where r = 1: interpolated between two measured limits, else with
latency taken as proportional to the limit, never more than m at once; it starts from the peak in
flight when that is lower (a limit can bind on one queued request while fewer run, and the P90s were
measured at what ran); a P90 just over target is one step past the knee, not lost capacity, so one
step back. A secant more than STEEPEST times as steep as latency proportional to the limit is not
the curve but a change of the backend between the two readings (capacity halved while L + 1 was
probed: 0.86x at 12, 1.94x at 13): a batching engine's latency grows slower than its batch below
what its KV cache holds; followed, such a secant cut one step, and the next cut waited for evidence
at that limit. Past what the KV cache holds a steep secant is the curve, since each request more
evicts one that runs (preemption): the simulated engine read TPOT 0.60x at 18 and 2.06x at 20 with
K = 17, where L / r cut to 10. Growth stops at J so that every raise past it is measured against
the limit below. Far from any limit measured at the band, growth is fast, as far as room allows,
and up to K at once, because below what its KV cache holds a batching engine's latency grows slower
than its batch (it runs the batch in one step per token; on the real engine TPOT 2.2x for 4x the
batch), and each step costs the wait for min_samples values from requests sent after it (at 8 with
400-token answers, about 10 s). So room takes P90 as growing with the square root of the limit up
to K: taken as proportional, room was one request at 8 with TPOT 0.75x its target, and a chatty
workload climbed from 8 to 10 one request at a time, 10 s each. Past K, where preemption and
queueing make latency grow faster than the batch, room is proportional and a step never more than
sqrt(L) at once, so one step cannot overshoot the knee by more than a probe can undo; from J on
a step is p L, doubled after a probe that gained in proportion (sla.controller says why). Near a knee one
proportional step, never into the limit measured at the band, unless that is L + 1 and its reading
`probe_every` old: a P90 just over target on a few values there (a fresh gateway's first batch, one
slow spell) otherwise held L for the ledger's memory, and a P90 of that limit measured again
settles it. Growth stops while the requests of the last raise landed outside the engine and the
rate did not rise (sla.verdicts.held_outside). A batching engine's rate rises with its batch until
its KV cache is full, so with the SLA out of reach the first probe goes there at once instead of in
steps of q L, each of which costs a settle and a dwell; not again while a limit as high was measured
lately, so a jump undone is not repeated before its evidence ages.
"""

from __future__ import annotations

import math

from gateway.control.algorithms.sla.ledger import Entry
from gateway.control.algorithms.sla.params import SLAParams
from gateway.control.algorithms.sla.verdicts import Growth, fits_whole, held_outside, hidden
from gateway.types import Observation

STEEPEST = 4.0
"""The steepest secant a cut follows, as a multiple of the slope r / L of latency proportional to
the limit."""


def step_size(limit: int, gain: float) -> int:
    """One proportional step: gain x limit, at least 1."""
    return max(1, round(gain * limit))


def cut(limit: int, r: float, lower: Entry | None, fits: int | None, p: SLAParams) -> tuple[int, str]:
    """Where to cut a limit whose P90/target is r > 1, and how that was found; `lower` is the
    nearest lower limit measured lately, `fits` the requests the KV cache holds if known."""
    if (
        lower is not None
        and lower.ratio is not None
        and lower.ratio < r
        and (
            (r - lower.ratio) / (limit - lower.limit) <= STEEPEST * r / limit
            or (fits is not None and limit > fits)
        )
    ):
        wanted = limit - (r - 1.0) * (limit - lower.limit) / (r - lower.ratio)
        how = f"between {lower.limit} ({lower.ratio:.2f}x) and {limit} ({r:.2f}x)"
    elif r <= 1.0 + 2.0 * p.probe_gain:
        wanted = max(limit / r, limit - step_size(limit, p.probe_gain))
        how = f"{limit} / {r:.2f}, at most one step"
    else:
        wanted = limit / r
        how = f"{limit} / {r:.2f}"
    wanted = max(wanted, limit * (1.0 - p.max_decrease))
    return min(limit - 1, math.floor(wanted)), how


def growth(
    obs: Observation,
    on: Growth,
    fresh: list[Entry],
    seen_knee: tuple[int, float] | None,
    p: SLAParams,
    judged: int | None,
    least: int = 0,
) -> tuple[int, str]:
    """How far to grow within target on the evidence `on`, and why: 0 while raises only land outside
    the engine. `judged`: J (`judged_from`); `least`: the step a throughput probe that gained in
    proportion asks for next."""
    limit, r = obs.limit, on.ratio
    band = min(
        (e for e in fresh if e.limit > limit and e.ratio is not None and e.ratio >= p.increase_below),
        key=lambda e: e.limit,
        default=None,
    )
    knee, age = (None, 0.0) if band is None else (band.limit, obs.now - band.at)
    # The next limit up, read at the band `probe_every` ago, is measured again; no other is entered.
    again = knee == limit + 1 and age >= p.probe_every
    near = seen_knee is not None and seen_knee[0] >= limit and obs.now - seen_knee[1] <= p.knee_memory
    room = rise_room(limit, r, p.increase_below, on.fits)
    past = judged is not None and limit >= judged
    if knee is None and not near and not past:
        reach = max(math.ceil(math.sqrt(limit)), (on.fits or 0) - limit)
        step = max(step_size(limit, p.probe_gain), min(room, reach))
        why = "toward the band"
    else:
        step = max(1, min(room, max(least, step_size(limit, p.probe_gain))))
        if knee is not None:
            step = min(step, knee - limit if again else knee - 1 - limit)
        why = f"near {knee or (seen_knee and seen_knee[0])}, measured at or over {p.increase_below:g}"
        if again:
            why = f"{knee} again, read at or over {p.increase_below:g} {age:.0f}s ago"
        elif knee is None and not near:
            why = "one step"
    if judged is not None and limit < judged:
        step = min(step, judged - limit)
    held = held_outside(fresh, limit, p.hidden_share, p.min_gain, hidden(obs))
    if held is not None:
        return 0, held
    return min(step, obs.ceiling - limit), why


def rise_room(limit: int, r: float, u: float, fits: int | None) -> int:
    """How far the limit may rise before P90/target r reaches u: with latency growing as the square
    root of the limit where the rise stays within what the KV cache holds (`fits`), else in
    proportion to it."""
    if r <= 0:
        return limit
    factor = u / r  # the factor P90 may grow by
    proportional = math.floor(limit * (factor - 1.0))
    if fits is None or limit >= fits:
        return proportional
    return max(proportional, min(fits - limit, math.floor(limit * (factor**2 - 1.0))))


def judged_from(obs: Observation, p: SLAParams, outside: float | None, batch: float | None) -> int | None:
    """The limit from which a raise is a throughput probe, kept only on a measured gain, if known:
    what the KV cache holds, or holds with every request at its full size where that is fewer, or
    the full `batch` (`full_batch`) where that is fewer still, plus the requests in flight that
    the engine does not hold (`outside`, a mean)."""
    fits = fits_whole(obs)
    bounds = [] if fits is None else [math.ceil(fits * p.judged_past_kv)]
    if batch is not None:
        bounds.append(math.ceil(batch))
    if not bounds:
        return None
    return max(1, min(bounds)) + math.floor(outside or 0.0)


def full_batch(measured: list[Entry]) -> float | None:
    """The most requests the engine ran at a limit among `measured` where it also held one or more
    waiting, on average: a batch it did not grow past (`max_num_seqs`, or its KV cache full)."""
    ran = [e.running for e in measured if e.running is not None and (e.waiting or 0.0) >= 1.0]
    return max(ran) if ran else None


def probe_up(obs: Observation, start: int, least: int, measured: list[Entry], q: float) -> tuple[int, bool]:
    """Where a throughput probe from `start` goes, and whether that is a jump: straight to what the
    KV cache holds when that is above max(least, q x start) more and no limit as high is among
    `measured` (the entries measured lately), else that step."""
    step = max(least, step_size(start, q))
    fits = obs.kv_fits
    if fits is None or fits - start <= step or any(e.limit >= fits for e in measured):
        return start + step, False
    return fits, True
