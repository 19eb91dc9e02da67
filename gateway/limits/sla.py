"""SLA controller: the most output tokens/s the backend gives while every P90 stays under target,
learned online from what each limit delivered; when no limit meets the SLA, say so and hold the
limit with the most throughput instead of starving the backend.

Every tick the algorithm is told the output tokens delivered since the previous tick (the engine's
count, else finished requests plus streams' progress, and which came as whole answers) and the
window P90s since the limit last changed. It keeps a ledger (gateway.limits.ledger) of the rate,
its count noise, the requests held outside the engine and the worst P90/target ratio r at each
limit L, and moves by these rules, in order (u = `increase_below`, K = the requests the KV cache
holds, R = max(sqrt L, K - L) as in gateway.limits.sla_steps, parameters in gateway.limits.sla_params):

    limit not binding and r <= 1                     hold                   not_binding
    r > 1 on enough evidence and a floor is proven (gateway.limits.sla_floor)
                                                     throughput climb below  sla_infeasible
    r > 1, a cut under `settle` ago, the front end's delay over target under 2 x `probe_dwell` where
    it can prove a floor, or a floor proven but the lowest limit measured under `floor_dwell`
                                                     hold                   insufficient_samples
    r > 1 otherwise         L <- where r = 1 from the peak in flight: the secant through a lower
                            limit measured lately (not once L held `max_probe_wait`, nor one that
                            implies a change of the backend below K), else L / r (sla_steps.cut)
                                                                                       p90_over_target
    r > 1 on too little evidence                     hold                   insufficient_samples
    a lower limit delivered more than (1 + g) x L's rate beyond the noise    down   throughput_falls
    r < u, binding, probe due, no knee known         L <- L + max(p L, min(L (u / r - 1), R))     probe
    r < u, binding, probe due, near a known knee     L <- L + max(1, min(L (u / r - 1), p L)) < knee  probe
    otherwise                                        hold                   steady
Growth reads r on evidence (gateway.limits.sla_evidence.growth_evidence) and stops at J =
`judged_past_kv` x K; a raise from J on is judged as a throughput probe is.
Throughput climb (SLA infeasible): probe L <- L + max(s, q L), or straight to K when K is above that
and no limit as high was measured lately; after `probe_dwell` seconds measured since its requests
turned over keep it if the rate rose by (1 + g) beyond the noise (a step that gained half in proportion
doubles the next), else go back (no_gain); between probes hold the limit with the most throughput,
waiting `probe_every` only after a higher limit was measured to deliver less; a jump to K from
there, when due, goes at once.
Any probe being measured goes back at once when the engine ran no more requests at it than at the
limit it came from (gateway.limits.sla_batch).
Finally L <- clamp(L, floor, ceiling).

Why each rule:
- Not binding: a limit that holds nothing back has produced no evidence about itself, so quiet
  periods and traffic that bypasses the gateway cannot move it.
- Infeasible: when latency does not fall as the limit falls, every cut only starves the engine;
  the limit goes where it delivered most and keeps probing upward, since latency is missed anyway
  and throughput is all that is left to win. A floor waits, held, until the lowest limit has been
  measured for `floor_dwell`: a slowdown that passes (a cold start) looks like one for a few
  seconds, and cutting on meanwhile would cascade to the floor limit. A batching engine's rate
  rises with its batch until the KV cache is full, so the first probe goes there at once rather
  than in steps of q L, each of which costs a settle and a dwell (a minute from a cut limit on a
  real engine); a jump kept does not double the next step, which would overshoot by twice the cache.
  The cuts that proved the floor were no failed probes, so the first probe goes at once: up from
  the limit the floor was proven at, or to K judged against the limit with the most throughput as
  measured (measuring it again first held that limit 6 s of a 25-s window at 0.8 of K's rate on
  the real engine); only a higher limit that delivered less makes it wait, or it would lead back.
- The front end's delay proves a floor only where a limit at least `floor_span` times higher showed
  it too (gateway.limits.sla_floor), so the limit holds for it only there: elsewhere holding only
  postpones the cut that leads to such a limit (8 s of an infeasible SLA at 4 on the real engine).
- A cut takes effect only once the requests admitted above it have finished (gateway.limits.in_force)
  and then as requests dispatched after it finish; a limit's P90s count once it has settled and
  its rate once its requests have turned over (gateway.limits.sla_settling), and a second cut waits
  for the settle: before it, it would act on the first cut's evidence again.
- A limit that held for `max_probe_wait` and is over target now met a change of the backend: the
  lower limits' readings are of before it, and a secant through one cuts too little (a step back
  where capacity halved), so the cut is L / r.
- Throughput decides where latency has room: KV saturation and preemptions are costs only as the
  measured rate or P90 shows them, so the limit climbs past what the KV cache holds, but only on a
  measured gain: climbing on the mere absence of a measured loss drifted into losses of 5-10% that
  the count noise of whole answers hides.
- Noise: a rate difference counts only beyond z standard deviations of the counts behind both
  rates (whole answers are a Poisson count, which the engine's own count avoids); a probe whose
  gain is within the noise is measured longer (up to `probe_every`), then undone if it was a raise
  within target (holding meets the SLA) and decided by its point estimate in the throughput climb
  (latency is missed anyway); probes are judged only on what they delivered once their requests
  turned over.
- Knee: near a limit measured at or over u (the latency curve turns up steeply there) growth is
  one proportional step (gateway.limits.sla_steps says where to). A probe undone (cut back, or lower
  throughput) doubles the wait before the next (gateway.limits.sla_pacing).
- Outside the batch: a rate grows at most in proportion to the batch the engine runs, so a probe
  whose requests only wait in its queue (the KV cache or `max_num_seqs` full) gained nothing, which
  the engine's count shows in two ticks where the rate needs a turnover and a dwell. The gateway's
  in-flight count minus vLLM's running + waiting is the queue the engine cannot see (a busy front
  end). When more than max(1, `hidden_share` x the last raise) landed there and the rate did not
  rise, raising further only lengthens that queue: growth stops and a throughput probe is undone at
  once; a front end that holds requests on their way in (the gap grows, and so does the rate) or
  stalled and recovered (the gap is back now) does not.
- Evidence (gateway.limits.sla_evidence says why): a cut needs the values behind the P90 to show it
  over target, else the limit holds; growth needs every P90 on `min_samples` values, or whole
  answers' e2e P90 well under target on the requests sent first, those in flight read as the slowest.
Sources: BBR's probing (Cardwell et al., 2016); Envoy's adaptive concurrency; Netflix concurrency-limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Literal

from gateway.limits.base import clamp, decide, is_binding, worst_ratio
from gateway.limits.ledger import Entry, Ledger
from gateway.limits.sla_batch import BatchSince
from gateway.limits.sla_evidence import (
    compare,
    evident,
    gains,
    growth_evidence,
    held_outside,
    hidden,
    over_target,
    probe_kept,
)
from gateway.limits.sla_floor import ProvenFloor, along_the_limit
from gateway.limits.sla_pacing import ProbePacing
from gateway.limits.sla_params import SLAParams
from gateway.limits.sla_settling import Settling
from gateway.limits.sla_steps import cut, growth, judged_from, probe_up, step_size
from gateway.types import SLA, Decision, Direction, Observation, Signal


class SLALimit:
    name = "sla"
    respects_kv_ceiling = False
    """KV pressure counts only as it shows in the measured rate and P90s."""

    def __init__(self, sla: SLA, params: SLAParams | None = None) -> None:
        self.sla = sla
        self.params = params if params is not None else SLAParams()
        self.ledger = Ledger(self.params.half_life, self.params.memory)
        self._probe_from: int | None = None  # where a throughput probe being measured started
        self._pacing = ProbePacing(self.params.probe_every, self.params.max_probe_wait)
        self._step = 0  # the next throughput probe's step after one gained in proportion (slow start)
        # The probe being measured: a throughput "step", a "jump" to K, or a raise "within" target.
        self._kind: Literal["step", "jump", "within"] = "step"
        self._last_move = Direction.HOLD
        self._knee: tuple[int, float] | None = None  # last limit measured at or over u, and when
        self._floor = ProvenFloor(self.params)
        self._settling = Settling(self.params.settle)
        self._batch = BatchSince()

    @classmethod
    def from_params(cls, params: Mapping[str, object], sla: SLA) -> SLALimit:
        return cls(sla, SLAParams.from_mapping(params))

    def initial_limit(self, floor: int, ceiling: int) -> int:
        return clamp(self.params.initial, floor, ceiling)

    def update(self, obs: Observation) -> Decision:
        self._settling.observe(obs)
        self._batch.observe(obs, self._settling.in_force_for, self._settling.new_epoch)
        decision = self._decide(obs)
        if decision.limit != obs.limit:
            self._last_move = decision.direction
        remembered = self._floor.remembered(obs.now)
        if decision.latency_floor is None and remembered is not None:
            decision = replace(decision, latency_floor=remembered)
        return decision

    def _decide(self, obs: Observation) -> Decision:
        signal, ratio = worst_ratio(obs, self.sla)
        if not is_binding(obs):
            # A limit that holds nothing back has produced no evidence about itself.
            self._probe_from = None
            return decide(
                obs, obs.limit, "not_binding", f"peak inflight {obs.peak_inflight} < limit {obs.limit}"
            )
        settled = self._settling.settled(obs)
        if obs.interval > 0 and self._settling.turned_over(obs):
            self.ledger.record_rate(
                obs.now,
                obs.limit,
                obs.delivered_tokens,
                obs.interval,
                finished=obs.finished,
                lumped=obs.lumped_tokens,
                hidden=hidden(obs),
                running=self._batch.running,
            )
        over, over_ratio = over_target(obs, self.sla, self.params.evidence_alpha)
        if over is not None or ratio >= self.params.increase_below:
            self._knee = (obs.limit, obs.now)
        if over is not None:
            if settled:
                self.ledger.record_ratio(obs.now, obs.limit, over_ratio, over, obs.p90[over])
            return self._over(obs, over, over_ratio)
        if signal is not None and evident(obs, self.sla) and settled:
            self.ledger.record_ratio(obs.now, obs.limit, ratio, signal, obs.p90[signal])
            if ratio <= 1.0:
                self._floor.forget()
        if ratio > 1.0:
            return decide(
                obs,
                obs.limit,
                "insufficient_samples",
                f"{signal} P90 is {ratio:.2f}x its target on {obs.counts.get(signal, 0) if signal else 0} "
                f"of {obs.min_samples} values since the last change",
            )
        return self._climb(obs, ratio)

    # -- over target ----------------------------------------------------------------------------

    def _over(self, obs: Observation, signal: Signal, r: float) -> Decision:
        target = self.sla.target(signal)
        assert target is not None
        fresh = self.ledger.fresh(obs.now)
        floor = self._floor.find(obs, signal, target, self._settling.settled(obs), fresh)
        if floor is not None:
            return self._infeasible(obs, floor)
        self._probe_from = None
        limit, settle = obs.limit, self._settling.settle(obs)
        if self._floor.front_end.in_doubt(obs):
            # The front end's delay is over target where it can prove a floor: hold while it shows
            # whether it lasts.
            return decide(obs, limit, "insufficient_samples", "TTFT over target outside the engine")
        if along_the_limit(fresh, obs.floor, span=self.params.floor_span):
            # A floor on less than `floor_dwell` seconds here: hold while it shows whether it lasts.
            return decide(
                obs, limit, "insufficient_samples", f"{signal} over target here as a span above: a floor?"
            )
        if self._last_move is Direction.DOWN and self._settling.in_force_for < settle:
            return decide(
                obs,
                limit,
                "insufficient_samples",
                f"{signal} P90 is {r:.2f}x its target; the last cut takes effect over {settle:.1f}s",
            )
        # A limit that held long is over target now: conditions changed, and what lower limits
        # delivered before describes the old ones.
        changed = obs.since_change >= self.params.max_probe_wait
        if changed:
            self._pacing.held()
        elif self._last_move is Direction.UP:
            self._pacing.failed(obs.now)
        used = min(limit, max(1, obs.peak_inflight))  # the concurrency the P90s were measured at
        lower = None if changed else self.ledger.below(obs.now, used)
        wanted, how = cut(used, r, lower, obs.kv_fits, self.params)
        return decide(
            obs,
            wanted,
            "p90_over_target",
            f"{signal} P90 {obs.p90[signal]:.3f}s is {r:.2f}x its target on "
            f"{obs.counts.get(signal, 0)} values: to where it meets it, {how}",
        )

    def _infeasible(self, obs: Observation, floor: dict[Signal, float]) -> Decision:
        """No limit meets the SLA: go where the most was delivered, and keep probing for more."""
        text = ", ".join(f"{s} {v:.3f}s" for s, v in floor.items())
        d = self._climb_rate(obs)
        return decide(obs, d.limit, "sla_infeasible", f"latency floor {text} over target; {d.detail}", floor)

    # -- within target ---------------------------------------------------------------------------

    def _climb(self, obs: Observation, r: float) -> Decision:
        """Within target: grow while latency has room, unless a lower limit delivered clearly more."""
        now, limit = obs.now, obs.limit
        here = self.ledger.get(limit)
        if self._probe_from is not None:
            return self._judge(obs, here, self._measured(obs, here))
        best = self.ledger.best(now, self.params.probe_dwell)
        if (
            self._measured(obs, here)
            and here is not None
            and best is not None
            and best.limit < limit
            and self._gains(best, here)
        ):
            self._pacing.failed(obs.now)
            lower = max(best.limit, limit - step_size(limit, self.params.probe_gain))
            return decide(obs, lower, "throughput_falls", compare(best, here))
        on = growth_evidence(obs, self.sla, r, self.params.increase_below)
        if on is not None and self._may_probe(obs):
            step, why = growth(obs, on, self.ledger.fresh(obs.now), self._knee, self.params)
            if step > 0:
                if self._last_move is Direction.UP:
                    self._pacing.held()  # the previous step held
                if (judged := judged_from(obs, self.params)) is not None and limit >= judged:
                    self._probe_from, self._kind = limit, "within"
                    why = f"{why}, past what the KV cache holds: kept on a measured gain"
                return decide(obs, limit + step, "probe", f"worst P90/target {on.ratio:.2f}: +{step} {why}")
            return decide(obs, limit, "steady", f"worst P90/target {on.ratio:.2f}; {why}")
        return decide(obs, limit, "steady", f"worst P90/target {r:.2f}")

    def _climb_rate(self, obs: Observation) -> Decision:
        """Latency cannot be met: probe upward and keep a step only if the rate rose clearly."""
        now, limit = obs.now, obs.limit
        here = self.ledger.get(limit)
        measured = self._measured(obs, here)
        if self._probe_from is None:
            best = self.ledger.best(now, self.params.probe_dwell)
            unknown = here is None or here.measured < self.params.probe_dwell  # never measured here
            if best and best.limit != limit and (unknown or (measured and self._gains(best, here))):
                if not unknown and limit > best.limit:
                    self._pacing.wait_from(now)
                elif self._pacing.due(now) and (up := self._probe_up(obs, best.limit))[1]:
                    return self._start_probe(obs, best.limit, *up)  # judged against the best as measured
                return decide(obs, best.limit, "throughput_falls", "to the limit with the most throughput")
            if self._may_probe(obs):
                return self._start_probe(obs, limit, *self._probe_up(obs, limit))
            return decide(obs, limit, "steady", "holding the limit with the most throughput")
        return self._judge(obs, here, measured)

    def _probe_up(self, obs: Observation, start: int) -> tuple[int, bool]:
        fresh = self.ledger.fresh(obs.now, self.params.probe_dwell)
        return probe_up(obs, start, self._step, fresh, self.params.rate_probe_gain)

    def _start_probe(self, obs: Observation, start: int, to: int, jump: bool) -> Decision:
        self._probe_from, self._kind, to = start, "jump" if jump else "step", min(obs.ceiling, to)
        return decide(obs, to, "probe", f"to {to}, what the KV cache holds" if jump else f"trying {to}")

    def _judge(self, obs: Observation, here: Entry | None, measured: bool) -> Decision:
        """A probe up from `_probe_from` being measured: keep it only if the rate rose beyond the noise."""
        assert self._probe_from is not None
        now, limit = obs.now, obs.limit
        start = self.ledger.get(self._probe_from)
        if start is not None and (why := self._batch.no_gain(limit, start, self.params)) is not None:
            return self._undo(obs, why)
        if not measured or here is None:
            return decide(obs, limit, "probing", f"measuring {limit} against {self._probe_from}")
        held = held_outside(
            self.ledger.fresh(now), limit, self.params.hidden_share, self.params.min_gain, hidden(obs)
        )
        keep: bool | None = held is None
        if keep and start is not None:
            more_time = self._settling.in_force_for < self._settling.turnover(obs) + self.params.probe_every
            # Within target holding meets the SLA; in the throughput climb latency is missed anyway.
            keep = probe_kept(here, start, self.params, more_time, on_point=self._kind != "within")
            if keep is None:
                return decide(obs, limit, "probing", f"measuring {compare(here, start)}")
        if keep:
            # Slow start: a gain of half the proportional one doubles the next step.
            strong = start is None or here.rate >= start.rate * (
                1.0 + 0.5 * (limit - start.limit) / start.limit
            )
            self._step = 2 * (limit - self._probe_from) if strong and self._kind == "step" else 0
            self._probe_from = None
            self._pacing.held()
            return decide(obs, limit, "probe", "" if start is None else compare(here, start))
        return self._undo(obs, held or compare(start, here) if start else "")

    def _undo(self, obs: Observation, why: str) -> Decision:
        """Back to where the probe being measured started."""
        assert self._probe_from is not None
        back, self._probe_from, self._step = self._probe_from, None, 0
        self._pacing.failed(obs.now)
        return decide(obs, back, "no_gain", why)

    def _measured(self, obs: Observation, here: Entry | None) -> bool:
        """Whether the current limit's rate stands on `probe_dwell` seconds measured since its requests
        turned over."""
        return (
            here is not None
            and here.measured >= self.params.probe_dwell
            and self._settling.in_force_for >= self._settling.turnover(obs) + self.params.probe_dwell
        )

    def _may_probe(self, obs: Observation) -> bool:
        """Settled, the wait after a failed probe over, and room below the ceiling. A throughput
        probe needs no P90: at a low limit with long answers 20 first tokens take minutes."""
        return self._settling.settled(obs) and self._pacing.due(obs.now) and obs.limit < obs.ceiling

    def _gains(self, a: Entry, b: Entry | None) -> bool:
        return b is not None and gains(a, b, self.params.min_gain, self.params.noise_z)
