"""The `goodput` controller: the most output tokens/s whose requests meet the SLA, from a small
model of the engine and two symmetric tests (docs/controller-goodput.md has the math on one page).

Every tick, with tau one turnover (the median e2e, at least Little's L / lambda), the epoch's
values first scaled to the engine's current pace (gc.model `Epoch.pace`), k of n of them over
their target per signal, r the worst P90/target, C the saturation cap, A where the latency line
through the last two limits meets the target (gc.model `Model.aim`):

    the limit held nothing back                      hold                       not_binding
    (every move is clamped to [floor, ceiling]; at the ceiling a raise is an `at_ceiling` hold)
    a floor is held: L < C and the engine queued none of ours, L <- min(C, m L); else a probe as
                                                     past the cap, on throughput sla_infeasible
    some signal misses more than 1/10 at alpha:
        a probe is pending                           L <- its base              p90_over_target
        the last cut is under a turnover old         hold                       insufficient_samples
        L <= half the first limit H below B the run cut from (B the limit it began at):
            its values not lower than H's at alpha (Mann-Whitney), on as many values, a
            turnover on, or lower along a line that meets the target below the floor limit
                                                     L <- B, held               sla_infeasible
            not lower, on fewer values               hold                       insufficient_samples
        L at the floor limit, a turnover measured    as above                   sla_infeasible
        otherwise                                    L <- max(beta L, min(A, L / r))
                                                                                p90_over_target
    (a run of cuts begins anew where the values rose since it began, the same test the other
    way, until it has halved the limit; it ends after a turnover with no miss shown)
    every signal misses less than 1/10 at alpha:
        a probe pending, measured: a gain beyond its noise keeps it, else L <- its base, C <- L
                                                                                probe / no_gain
        the engine queued Q >= 1 of ours             C <- min(C, L - Q)
        L < C                                        L <- min(C, max(min(L / r, m L),
                                                       min(A, L m^(age / tau))))  headroom
        L >= C, L's rate measured                    L <- L (1 + s), a probe    probe
    the burst of B that began the epoch shows every signal it measured under, B > L:
                                                     L <- min(C, B)             headroom
    otherwise                                        hold                       steady

Why: P90 <= T is P(miss) <= 1/10, so the direction is a binomial test on the share of misses,
the same alpha both ways (gc.evidence). Latency is affine in the limit, W = a + b L (gc.model):
past the knee a = 0 and W = L / X (Little's law), so latency grows at most in proportion to L
and L / r is safe for a raise, at most m-fold as slow start; the line through two limits
finds the target where a > 0, an extrapolation trusted m-fold per turnover of evidence; a cut
goes at least to L / r and at most to beta L (multiplicative decrease). Past the saturation cap a
raise adds only queue unless it shows a gain beyond its noise, as BBR keeps a bandwidth probe
only on a measured rise. Where halving the limit does not lower latency enough to meet the
target, latency is not the limit's: cutting on would only starve the engine; the halving is
judged between two limits read since the cuts began, so an engine that slowed as they began is
not taken for a floor. Requests sent together prefill together, so a burst in flight at once bounds
from above what as many measure when arrivals spread out: one that met the SLA shows its size does.
Sources: Little (1961); TCP's slow start and multiplicative decrease (RFC 5681) and its timer's
backoff (RFC 6298); BBR (Cardwell et al., 2016); the secant method; the Mann-Whitney U test;
vLLM's num_requests_waiting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from gateway.control.algorithms.base import clamp, decide, is_binding, worst_ratio
from gateway.control.algorithms.goodput import evidence as ev
from gateway.control.algorithms.goodput.model import Epoch, Floor, Model, Probe
from gateway.control.algorithms.goodput.params import GoodputParams
from gateway.types import SLA, Decision, Direction, Observation, Signal


class GoodputLimit:
    name = "goodput"
    respects_kv_ceiling = False
    """The KV cache caps free growth only; past it a raise is kept on a measured gain."""

    def __init__(self, sla: SLA, params: GoodputParams | None = None) -> None:
        self.sla = sla
        self.params = params if params is not None else GoodputParams()
        self.model = Model()
        self.tau = 0.0
        self._epoch: Epoch | None = None
        self._last_move = Direction.HOLD
        self._measured: set[Signal] = set()
        """The SLA signals the traffic has measured so far."""

    @classmethod
    def from_params(cls, params: Mapping[str, object], sla: SLA) -> GoodputLimit:
        return cls(sla, GoodputParams.from_mapping(params))

    def initial_limit(self, floor: int, ceiling: int) -> int:
        return clamp(self.params.initial, floor, ceiling)

    def update(self, obs: Observation) -> Decision:
        epoch = self._epoch_of(obs)
        self._turnover(obs, epoch)
        if not is_binding(obs):
            floor = None if self.model.floor is None else self.model.floor.p90
            text = f"peak inflight {obs.peak_inflight} < {obs.limit}"
            return decide(obs, obs.limit, "not_binding", text, floor)
        epoch.add(obs, epoch.start + self.params.settle * self.tau)
        pace = epoch.pace(self.tau, self.params.alpha)
        if pace != 1.0:
            self.model.forget()
        obs = ev.at_pace(obs, pace)
        decision = self._decide(obs, epoch)
        if decision.limit != obs.limit:
            self._last_move = decision.direction
            _, r = worst_ratio(obs, self.sla)
            if r > 0 and decision.reason in ("headroom", "p90_over_target"):
                self.model.moved(obs.limit, r)
        return decision

    def _turnover(self, obs: Observation, epoch: Epoch) -> None:
        """tau: the median e2e of the epoch when it has one, else the last known; at least what
        Little's law gives from the epoch's completions, L / lambda, which is known every tick
        where the median waits for requests to finish (when the engine slows, none do); at least
        a tick."""
        median = obs.p50.get("e2e")
        if median is not None and obs.counts.get("e2e", 0) > 0:
            self.tau = median
        self.tau = max(self.tau, epoch.turnover(obs), obs.interval)

    def _epoch_of(self, obs: Observation) -> Epoch:
        epoch = self._epoch
        if epoch is None or epoch.limit != obs.limit or obs.now - obs.since_change > epoch.start + 1e-9:
            epoch = self._epoch = Epoch(obs.limit, obs.now - obs.since_change)
        return epoch

    def _decide(self, obs: Observation, epoch: Epoch) -> Decision:
        counts = ev.counts(obs, self.sla)
        _, r = worst_ratio(obs, self.sla)
        alpha = self.params.alpha
        missed = [s for s, c in counts.items() if ev.over(c, alpha)]
        # Every signal the traffic measures must be shown under: one not yet read this epoch
        # (TPOT after a cut, before the new limit's streams have paced) is not.
        self._measured |= counts.keys()
        met = bool(counts) and all(s in counts and ev.under(counts[s], alpha) for s in self._measured)
        floor = self.model.floor
        if floor is not None and not met:
            return self._on_floor(obs, epoch, floor, r)
        self.model.floor = None
        if missed:
            return self._over(obs, missed[0], counts[missed[0]], r)
        if met or obs.since_change >= self.tau:
            # No miss shown for a turnover: the run of cuts, if any, reached the target.
            self.model.end_cuts()
        if met:
            return self._under(obs, epoch, r)
        if (size := ev.burst(obs, self.sla, alpha)) is not None and (d := self._burst(obs, size)):
            return d
        text = ", ".join(f"{s} {c.k} of {c.n} over" for s, c in counts.items()) or "no values"
        return decide(obs, obs.limit, "steady", f"{text}: neither test decides at {alpha:g}")

    def _until(self, obs: Observation) -> float:
        return obs.now + self._memory()

    def _memory(self) -> float:
        return self.params.memory * self.tau

    def _fail(self, obs: Observation, missed_by: float) -> None:
        self.model.fail(obs.limit, missed_by, obs.now, self._memory())

    # -- over target: cut --------------------------------------------------------------------

    def _over(self, obs: Observation, signal: Signal, count: ev.Count, r: float) -> Decision:
        model, limit, target = self.model, obs.limit, self.sla.targets()[signal]
        model.seen(obs.p90)
        text = f"{count.k} of {count.n} over target (P90 {r:.2f}x)"
        if model.probe is not None:
            base, model.probe = model.probe.limit, None
            self._fail(obs, r)
            return decide(obs, base, "p90_over_target", f"{text}: the probe from {base} is undone")
        settled = obs.since_change >= self.tau
        if self._last_move is Direction.DOWN and not settled:
            return decide(obs, limit, "insufficient_samples", f"{text}; the last cut takes a turnover")
        anchor, values = model.anchor, obs.values.get(signal, [])
        halved = anchor is not None and limit <= anchor[0] / 2
        if (
            anchor is None
            or anchor[1] != signal
            or (not halved and ev.lower(anchor[2], values, self.params.alpha))
        ):
            # No run of cuts yet, or latency rose since it began: conditions changed, start anew.
            # Once the cuts have halved the limit, a rise is only another answer that cutting
            # does not lower the latency.
            model.anchor, model.reference = (limit, signal, values), None
        elif limit <= obs.floor and settled:
            # Over target at the lowest limit there is: no limit meets the SLA.
            return self._infeasible(obs, anchor[0], count, signal)
        elif model.reference is not None and limit <= model.reference[0] / 2:
            # Past half, cut on only where the cuts are shown to lower the latency: this limit
            # against the first the run reached, twice as high, both read since the run began,
            # so that an engine that slowed as it began does not read as a floor.
            above, at_above = model.reference
            if not ev.lower(values, at_above, self.params.alpha):
                if settled and ev.no_lower(values, at_above, self.params.alpha):
                    return self._infeasible(obs, anchor[0], count, signal)
                return decide(obs, limit, "insufficient_samples", f"{text}: do cuts lower the latency?")
            if (
                settled
                and len(values) >= len(at_above)
                and ev.reach(above, at_above, limit, values, target) < max(1, obs.floor)
            ):
                # They lower it, but along a line that meets the target at no limit there is.
                return self._infeasible(obs, anchor[0], count, signal)
        if model.anchor is not None and limit < model.anchor[0] and model.reference is None:
            model.reference = (limit, values)
        self._fail(obs, r)
        wanted = max(limit * self.params.max_decrease, model.aim(limit, r))
        return decide(obs, min(limit - 1, math.floor(wanted)), "p90_over_target", f"{text}: to {wanted:.0f}")

    def _infeasible(self, obs: Observation, back: int, low: ev.Count, signal: Signal) -> Decision:
        """Halving the limit did not lower the misses: hold the higher limit and report the floor."""
        model = self.model
        targets = self.sla.targets()
        floor = {s: v for s, v in model.lowest.items() if v > targets.get(s, float("inf"))}
        model.floor = Floor(back, floor)
        model.end_cuts()
        model.bad = model.strikes = None
        text = ", ".join(f"{s} {v:.3f}s" for s, v in floor.items())
        detail = f"{signal} no lower at {obs.limit} ({low.k}/{low.n} over) than at {back}: floor {text}"
        return decide(obs, back, "sla_infeasible", detail, floor)

    def _on_floor(self, obs: Observation, epoch: Epoch, floor: Floor, r: float) -> Decision:
        """No limit meets the SLA: climb on throughput alone, as past the saturation cap."""
        model, limit = self.model, obs.limit
        queue = math.floor(epoch.queue)
        if queue >= 1:
            model.saturated_at(limit - queue, obs.now, self._until(obs))
        cap = model.saturation(obs, 1.0)
        if limit != floor.limit and model.probe is None:
            d = decide(obs, floor.limit, "sla_infeasible", "back to the limit held")
        elif model.probe is None and limit < cap and queue < 1:
            # Latency does not fall with the limit, so by Little's law throughput grows with it for
            # as long as the engine runs every request sent, which each scrape shows: grow as slow
            # start does, by m a tick, without a latency step, until it queues some.
            wanted = max(limit + 1, min(cap, math.floor(limit * self.params.max_increase)))
            d = decide(obs, wanted, "sla_infeasible", f"below the cap {cap:g}")
        else:
            d = self._probe(obs, epoch, epoch.rate, r)
        floor.limit = d.limit
        return decide(obs, d.limit, "sla_infeasible", f"latency floor held; {d.detail}", floor.p90)

    # -- under target: grow ------------------------------------------------------------------

    def _under(self, obs: Observation, epoch: Epoch, r: float) -> Decision:
        model, limit = self.model, obs.limit
        model.met(limit)
        if model.probe is not None:
            return self._probe(obs, epoch, epoch.goodput, r)
        queue = math.floor(epoch.queue)
        if queue >= 1:
            model.saturated_at(limit - queue, obs.now, self._until(obs))
        if limit >= obs.ceiling:
            return decide(obs, limit, "at_ceiling", f"P90 {r:.2f}x target at the ceiling {obs.ceiling}")
        cap = model.saturation(obs, r)
        if limit < cap:
            # L / r is safe, latency growing at most in proportion to the limit: up to m-fold a
            # raise (slow start). Past it the line is an extrapolation, trusted m-fold per
            # turnover the evidence took, as slow start doubles once per round trip.
            m = self.params.max_increase
            turnovers = obs.since_change / self.tau if self.tau > 0 else 1.0
            trusted = min(model.aim(limit, r), limit * m**turnovers)
            safe = min(limit / r if r > 0 else math.inf, limit * m)
            wanted = max(limit + 1, math.floor(min(cap, max(safe, trusted))))
            return decide(obs, wanted, "headroom", f"P90 {r:.2f}x target, below the cap {cap:g}")
        return self._probe(obs, epoch, epoch.goodput, r)

    def _burst(self, obs: Observation, size: int) -> Decision | None:
        """A burst of `size` requests in flight at once met the SLA: the limit goes there, up to
        the saturation cap (None where that is no raise)."""
        cap = self.model.saturation(obs, 1.0)
        wanted = math.floor(min(cap, size))
        if wanted <= obs.limit:
            return None
        return decide(obs, wanted, "headroom", f"a burst of {size} met the SLA, below the cap {cap:g}")

    def _probe(self, obs: Observation, epoch: Epoch, meter: ev.RateMeter, r: float) -> Decision:
        """Past the cap: raise by `probe_step`, and keep the raise only on a gain beyond the noise."""
        model, limit = self.model, obs.limit
        if model.probe is not None:
            if not epoch.measured(self.tau):
                return decide(obs, limit, "probing", f"measuring {limit} against {model.probe.limit}")
            base, model.probe = model.probe, None
            if not ev.gained(meter, base.meter, self.params.alpha):
                self._fail(obs, 1.0)
                return decide(
                    obs,
                    base.limit,
                    "no_gain",
                    f"{meter.rate:.0f} tok/s at {limit}, "
                    f"{base.meter.rate:.0f} at {base.limit}: no gain beyond the noise",
                )
        step = max(1, math.floor(limit * self.params.probe_step))
        bad = model.failed(obs, r)
        if bad is not None:
            step = min(step, bad - 1 - limit)
        if step < 1:
            return decide(obs, limit, "steady", f"{bad} failed lately: holding {limit}")
        if not epoch.measured(self.tau):
            return decide(obs, limit, "insufficient_samples", f"measuring {limit} before a probe")
        model.probe = Probe(limit, meter)
        return decide(obs, limit + step, "probe", f"+{step}, kept on a gain beyond the noise")
