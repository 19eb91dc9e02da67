"""The `sla` controller's rules on goodput within target: the output of the requests that met every
target, measured per limit as the rate times the share met (sla.ledger).

Within target, or over it on too little evidence to cut, while no probe is measured and the limit
in force stands on `probe_dwell` seconds since its requests turned over (z = `noise_z`, p =
`probe_gain`):

    a lower limit delivered more than (1 + g) x L's goodput beyond the noise
                                                     L <- that limit        throughput_falls
    the share of L's output that met every target under `min_met` by more than z standard
    deviations, a probe due      L <- L - max(1, p L), kept unless L's goodput was clearly more
                                                                                      probe
and a raise of s from L is judged on goodput (sla.probe's "within") when it starts
from J or reaches a limit measured lately whose share met is under `min_met`.

Why each rule:
- A P90 counts requests where goodput counts tokens. Where answers differ in length the longest
  miss first: in virtual time, 16-400-token answers against an e2e target read a P90 of 0.8-0.9x
  at 12-13 while a fifth to a half of their output missed it, and growing to the band delivered
  570 good tokens/s where a fixed 8, missing none, delivered 721.
- So where less than `min_met` of the output met every target a step lower is tried and kept
  unless it delivered clearly less goodput (fewer misses for as much goodput), and a raise back to
  such a limit stands only on a measured gain. 0.9 matches the P90: a target the P90 meets lets a
  tenth of the requests miss it.
- The share is a binomial count of the answers behind it, so a step down waits until it is short
  by more than its noise: on the real engine a fresh gateway's first answers (10% of their output
  missed) stepped 8 down to 7 at 7 s without that rule.
- A lower limit that delivered clearly more goodput is where the limit goes, not a step toward it:
  each step waits a dwell, and in virtual time a step from 16 (289 good tokens/s) held 14 and 13,
  where under half the output met the target, for 20 s while 11 had delivered 744.
- Where no limit meets the SLA every request misses, and the throughput climb compares all tokens
  (sla.probe).
Pure: the caller passes each observation, with its time.
"""

from __future__ import annotations

from gateway.control.algorithms.base import decide
from gateway.control.algorithms.sla.ledger import Entry, Ledger
from gateway.control.algorithms.sla.params import SLAParams
from gateway.control.algorithms.sla.probe import Probes
from gateway.control.algorithms.sla.steps import step_size
from gateway.control.algorithms.sla.verdicts import compare
from gateway.types import Decision, Observation


def lower_for_goodput(obs: Observation, ledger: Ledger, probes: Probes, p: SLAParams) -> Decision | None:
    """To a lower limit that delivered clearly more goodput, or a step down where the share met is
    short of `min_met` beyond its noise; None where neither, or not yet measured."""
    limit, here = obs.limit, ledger.get(obs.limit)
    if probes.measuring or here is None or not probes.measured(obs, here):
        return None
    best = ledger.best(obs.now, p.probe_dwell, good=True)
    if best is not None and best.limit < limit and probes.gains(best, here, good=True):
        probes.pacing.failed(obs.now)
        return decide(obs, best.limit, "throughput_falls", compare(best, here, good=True))
    short = here.met + p.noise_z * here.met_sd < p.min_met
    if short and limit > obs.floor and probes.may_lower(obs):
        lower = max(obs.floor, limit - step_size(limit, p.probe_gain))
        probes.lower(limit)
        return decide(
            obs, lower, "probe", f"{1 - here.met:.0%} of the output missed a target: trying {lower}"
        )
    return None


def judged_raise(limit: int, step: int, judged: int | None, fresh: list[Entry], p: SLAParams) -> str | None:
    """Why the raise of `step` from `limit` is kept only on a measured gain, or None: it starts from
    J (`judged`), or reaches a limit among `fresh` where less than `min_met` of the output met every
    target."""
    if judged is not None and limit >= judged:
        return "past what the KV cache holds"
    if any(limit < e.limit <= limit + step and e.met < p.min_met for e in fresh):
        return "to where the output missed targets"
    return None
