"""SLA controller: the most output tokens/s the backend gives while every P90 stays under target,
learned online from what each limit delivered; when no limit meets the SLA, say so and hold the
limit with the most throughput instead of starving the backend.

Every tick the algorithm is told the output tokens delivered since the previous tick (the engine's
count, else finished requests plus streams' progress, and which came as whole answers) and the
window P90s since the limit last changed. It keeps a ledger (sla.ledger) of the rate,
its count noise, the requests held outside the engine, the worst P90/target ratio r and each
signal's P90 at each limit L, and moves by these rules, in order (u = `increase_below`, K = the
requests the KV cache holds, W = those it holds with every request at its full size, R = max(sqrt L,
K - L) as in sla.steps, parameters in sla.params):

    not binding                                      hold                   not_binding
    r > 1 on enough evidence and a floor is proven (sla.floor)
                                                     throughput climb below  sla_infeasible
    r > 1, a cut under `settle` ago, the front end's delay over target under 2 x `probe_dwell` where
    it can prove a floor, or a floor proven but the lowest limit measured under `floor_dwell`
                                                     hold                   insufficient_samples
    r > 1 otherwise         L <- where r = 1 from the peak in flight: the secant through a lower
                            limit measured lately (not once L held `max_probe_wait`, nor one that
                            implies a change of the backend below K), else L / r (sla.steps.cut)
                                                                                       p90_over_target
    a lower limit delivered more than (1 + g) x L's goodput beyond the noise
                                                     L <- that limit        throughput_falls
    the share of L's output that met every target under `min_met` by more than z standard
    deviations (r <= 1, or r > 1 on too little evidence), a probe due
                                 L <- L - max(1, p L), kept unless L's goodput was clearly more
                                                                                      probe
    r > 1 on too little evidence                     hold                   insufficient_samples
    r <= 1, L measured with Q >= 1 requests on average in the engine's queue, a probe due
                     L <- L - floor(Q), kept unless L delivered clearly more (sla_probe) probe
    r <= 1, L measured with Q >= 1, no probe due      hold                   steady
    r < u, binding, probe due, under J, no knee known  L <- L + max(p L, min(room, R))            probe
    r < u, binding, probe due, from J on or near a known knee
                                          L <- L + max(1, min(room, max(s, p L))) < knee       probe
    otherwise                                        hold                   steady
room: the rise that brings r to u, with P90 growing as sqrt(L) up to K and as L past it (sla_steps).
Growth reads r on evidence (sla.verdicts.growth_evidence) and stops at J =
min(`judged_past_kv` x min(K, W), B) + the requests in flight at L that the engine does not hold,
B the most requests the engine ran where it also queued some (sla.steps.full_batch); a raise
from J on, or to a limit measured lately where less than `min_met` of the output met every target,
is judged as a throughput probe is, on goodput, and s is twice the last one after one that gained
at least half in proportion (sla.probe's slow start), else 0. Goodput: the rate
times the share of the output whose request met every target (sla.ledger).
The throughput climb, and how a probe is judged, kept or undone: sla.probe.
Finally L <- clamp(L, floor, ceiling).

Why each rule:
- Not binding: a limit that holds nothing back has produced no evidence about itself, so quiet
  periods and traffic that bypasses the gateway cannot move it, and an idle backend keeps its limit
  for the next burst: a limit fallen back while it idled queues in the gateway what the engine
  would batch at once. What a burst after a quiet spell may take is the burst room's (gateway.control.room).
- Infeasible: when latency does not fall as the limit falls, every cut only starves the engine,
  so the limit climbs on throughput instead (sla.probe says how and why). A floor
  waits, held, until the lowest limit has been measured for `floor_dwell`: a slowdown that passes
  (a cold start) looks like one for a few seconds, and cutting on meanwhile would cascade to the
  floor limit.
- The front end's delay proves a floor only where a limit at least `floor_span` times higher showed
  it too (sla.floor), so the limit holds for it only there: elsewhere holding only
  postpones the cut that leads to such a limit (8 s of an infeasible SLA at 4 on the real engine).
- A floor made of time spent outside the engine is forgotten once the limit in force shows that
  time gone (sla.floor says how), and so are the P90s read at every other limit:
  they were read with that time in them, and left in the ledger they proved the same floor again.
- A cut takes effect only once the requests admitted above it have finished (sla.in_force)
  and then as requests dispatched after it finish; a limit's P90s count once it has settled and
  its rate once its requests have turned over (sla.settling), and a second cut waits
  for the settle: before it, it would act on the first cut's evidence again.
- A limit that held for `max_probe_wait` and is over target now met a change of the backend: the
  lower limits' readings are of before it, and a secant through one cuts too little (a step back
  where capacity halved), so the cut is L / r.
- Throughput decides where latency has room: KV saturation and preemptions are costs only as the
  measured rate or P90 shows them, so the limit climbs past what the KV cache holds, but only on a
  measured gain: climbing on the mere absence of a measured loss drifted into losses of 5-10% that
  the count noise of whole answers hides. That starts at W where W is fewer than K: the requests
  running are young and read small, but past W they preempt one another as they grow (on the real
  engine, 450-token completions delivered 692-715 tokens/s at 18 = W and 615 at 20, where K read
  20-21). Requests the engine does not hold (a front end's queue) take none of its cache, so they
  add to J. Past J one step is p L: past W latency jumps (TPOT 0.35x at 14 = W, 1.18x at 17 in
  virtual time), and a larger probe undone moved the limit by more than 15%; a raise that gained
  in proportion doubles the next, so a rate that keeps rising is climbed fast.
- Noise: a rate difference counts only beyond z standard deviations of the counts behind both
  rates, and a raise within target whose gain stays within the noise is undone: holding meets the
  SLA (sla.probe).
- Goodput within target: the objective is the output of requests that met every target, which a
  P90 over requests does not measure (sla.goodput says how it is weighed and why).
- Knee: near a limit measured at or over u (the latency curve turns up steeply there) growth is
  one proportional step (sla.steps says where to). Any P90 read marks a knee, even
  on few values, but the limit read under u on evidence since is no knee any more: a fresh
  gateway's first TPOT reading at 8 (0.92x, the pace of its first streams) kept growth from 8 to
  one request per step for a minute where 8 then read 0.67-0.75x. A probe undone (cut back, or lower
  throughput) doubles the wait before the next (sla.pacing).
- The engine's queue: requests waiting there add nothing to the batch it runs (`max_num_seqs` or
  the KV cache full), wait in its FIFO where the gateway's priorities and deadlines do not reach,
  and add their wait to every TTFT, so within target too the limit comes down to the batch, and no
  raise is made from a limit at which the engine queued: it cannot add to the batch, and judged on
  its gain such raises were kept on goodput readings 15% apart at the same batch on the real engine
  (the misses come in spells the count noise does not see), holding the limit past the batch with
  its TTFT over target. In virtual time chat-short at a loose SLA held 58 with 26 waiting and TTFT
  P90 at 0.60x its target; at the batch, 32.6 and 0.07x for the same 924 tokens/s (on the real
  engine 1,555 tokens/s against 1,523, within the spread, TTFT P90 0.92 s against 1.04). A raise
  from a limit without a queue past the batch is still judged on its gain.
- Outside the batch: a probe whose requests only wait in the engine's queue, or in a busy front
  end (the gateway's in-flight count minus vLLM's running + waiting), gained nothing and is undone
  without waiting for the rate (sla.probe). When more than max(1, `hidden_share` x
  the last raise) landed outside the engine and the rate did not rise, raising further only
  lengthens that queue, so growth stops; a front end that holds requests on their way in (the gap
  grows, and so does the rate) or stalled and recovered (the gap is back now) does not stop it.
- Evidence (sla.verdicts says why): a cut needs the values behind the P90 to show it over target,
  else the limit holds; growth needs every P90 on `min_samples` values, or the cohorts well under
  target: per signal the streams of the burst that began the epoch and then the epoch's requests in
  the order they were sent, each that has not measured the signal read as the slowest, over the
  longest prefix whose P90 is finite. Growth on the cohorts waits for no settle: the settle keeps
  the fast requests that come back first from standing for the new limit, and a prefix in the order
  sent leaves none out for being slow (the youngest it leaves out for their age); a request sent
  since a change ran beside the older limit's still in flight, at most the new limit after a raise,
  more after a cut, where it only reads higher.
Sources: BBR's probing (Cardwell et al., 2016); Envoy's adaptive concurrency; Netflix concurrency-limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gateway.control.algorithms.base import clamp, decide, is_binding, worst_ratio
from gateway.control.algorithms.sla.engine_batch import BatchSince
from gateway.control.algorithms.sla.floor import ProvenFloor, along_the_limit
from gateway.control.algorithms.sla.goodput import judged_raise, lower_for_goodput
from gateway.control.algorithms.sla.ledger import Ledger
from gateway.control.algorithms.sla.params import SLAParams
from gateway.control.algorithms.sla.probe import Probes
from gateway.control.algorithms.sla.settling import Settling
from gateway.control.algorithms.sla.steps import cut, full_batch, growth, judged_from
from gateway.control.algorithms.sla.verdicts import (
    evident,
    growth_evidence,
    hidden,
    over_target,
    readings,
)
from gateway.types import SLA, Decision, Direction, Observation, Signal


class SLALimit:
    name = "sla"
    respects_kv_ceiling = False
    """KV pressure counts only as it shows in the measured rate and P90s."""

    def __init__(self, sla: SLA, params: SLAParams | None = None) -> None:
        self.sla = sla
        self.params = params if params is not None else SLAParams()
        self.ledger = Ledger(self.params.half_life, self.params.memory)
        self._last_move = Direction.HOLD
        self._knee: tuple[int, float] | None = None  # last limit measured at or over u, and when
        self._floor = ProvenFloor(self.params)
        self._settling = Settling(self.params.settle)
        self._batch = BatchSince()
        self._probes = Probes(self.params, self.ledger, self._settling, self._batch)

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
            self._probes.drop()
            return self._idle(obs)
        settled = self._settling.settled(obs)
        if obs.interval > 0 and self._settling.turned_over(obs):
            self.ledger.record_rate(
                obs.now,
                obs.limit,
                obs.delivered_tokens,
                obs.interval,
                finished=obs.finished,
                lumped=obs.lumped_tokens,
                answered=obs.answered_tokens,
                missed=obs.missed_tokens,
                hidden=hidden(obs),
                running=self._batch.running,
            )
        over, over_ratio = over_target(obs, self.sla, self.params.evidence_alpha)
        if over is not None or ratio >= self.params.increase_below:
            self._knee = (obs.limit, obs.now)
        if settled:
            self.ledger.record_readings(
                obs.now, obs.limit, readings(obs, self.sla, self.params.evidence_alpha)
            )
        if over is not None:
            if settled:
                self.ledger.record_ratio(obs.now, obs.limit, over_ratio)
            return self._over(obs, over, over_ratio)
        if signal is not None and evident(obs, self.sla) and settled:
            self.ledger.record_ratio(obs.now, obs.limit, ratio)
            if ratio <= 1.0:
                self._floor.forget()
        if ratio > 1.0:
            if self._probes.lowering:
                return self._probes.judge(obs)  # a step down needs no evidence that latency is met
            return lower_for_goodput(obs, self.ledger, self._probes, self.params) or decide(
                obs,
                obs.limit,
                "insufficient_samples",
                f"{signal} P90 is {ratio:.2f}x its target on {obs.counts.get(signal, 0) if signal else 0} "
                f"of {obs.min_samples} values since the last change",
            )
        return self._climb(obs, ratio)

    def _idle(self, obs: Observation) -> Decision:
        """Hold: nothing held back, nothing learnt about the limit."""
        return decide(obs, obs.limit, "not_binding", f"peak inflight {obs.peak_inflight} < limit {obs.limit}")

    # -- over target ----------------------------------------------------------------------------

    def _over(self, obs: Observation, signal: Signal, r: float) -> Decision:
        if self._floor.outlived(
            obs.now, self.ledger.get(obs.limit), self.sla.ttft_p90, self._settling.in_force_for
        ):
            # The time outside the engine that made the floor is gone; the other limits read it.
            self._floor.forget()
            self.ledger.forget_latency(keep=obs.limit)
        fresh = self.ledger.fresh(obs.now)
        floor = self._floor.find(obs, signal, self.sla.ttft_p90, self._settling.settled(obs), fresh)
        if floor is not None:
            return self._infeasible(obs, floor)
        self._probes.drop()
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
            self._probes.pacing.held()
        elif self._last_move is Direction.UP:
            self._probes.pacing.failed(obs.now)
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
        d = self._probes.climb(obs)
        return decide(obs, d.limit, "sla_infeasible", f"latency floor {text} over target; {d.detail}", floor)

    # -- within target ---------------------------------------------------------------------------

    def _climb(self, obs: Observation, r: float) -> Decision:
        """Within target: grow while latency has room, unless a lower limit delivered clearly more."""
        limit = obs.limit
        here = self.ledger.get(limit)
        if self._probes.measuring:
            return self._probes.judge(obs)
        if (lower := lower_for_goodput(obs, self.ledger, self._probes, self.params)) is not None:
            return lower
        if (to_batch := self._probes.to_batch(obs, here)) is not None:
            return to_batch
        if here is not None and here.waiting is not None and here.waiting >= 1.0:
            return decide(obs, limit, "steady", f"the engine held {here.waiting:.1f} of {limit} waiting")
        on = growth_evidence(obs, self.sla, r, self.params.increase_below)
        if on is not None and self._probes.may_probe(obs, settled=on.bounded):
            if self._knee is not None and self._knee[0] == limit:
                self._knee = None  # read under u on evidence since: a limit's newest reading stands
            fresh = self.ledger.fresh(obs.now)
            outside = here.hidden if here is not None else None
            judged = judged_from(obs, self.params, outside, full_batch(fresh))
            step, why = growth(obs, on, fresh, self._knee, self.params, judged, self._probes.slow_start)
            if step > 0:
                if self._last_move is Direction.UP:
                    self._probes.pacing.held()  # the previous step held
                if (past := judged_raise(limit, step, judged, fresh, self.params)) is not None:
                    self._probes.within(limit)
                    why = f"{why}, {past}: kept on a measured gain"
                return decide(obs, limit + step, "probe", f"worst P90/target {on.ratio:.2f}: +{step} {why}")
            return decide(obs, limit, "steady", f"worst P90/target {on.ratio:.2f}; {why}")
        return decide(obs, limit, "steady", f"worst P90/target {r:.2f}")
