"""SLA controller: the most output tokens/s the backend gives while every P90 stays under target,
learned online from what each limit delivered; when no limit meets the SLA, say so and hold the
limit with the most throughput instead of starving the backend.

Every tick the algorithm is told the output tokens delivered since the previous tick (finished
requests plus the progress of streams in flight) and the window P90s since the limit last changed.
It keeps a ledger (gateway.limits.ledger) of the delivery rate and the worst P90/target ratio r
measured at each limit L, and moves by these rules, in order (u = `increase_below`):

    limit not binding and r <= 1                     hold                   not_binding
    r > 1 on enough evidence, and either the front end's own delay (proxy TTFT P90 - engine TTFT
    P90) is over target, or a lower limit L' was measured over target with r' >= t x r
                                                     L <- the limit of the best rate   sla_infeasible
    r > 1 on enough evidence, a lower L' measured    L <- L - (r - 1) (L - L') / (r - r')  p90_over_target
    r > 1 on enough evidence, no lower limit known   L <- L x max(1 - m, 1 / r)        p90_over_target
    r > 1 on too little evidence                     hold                   insufficient_samples
    a fresh lower limit delivered > (1 + g) x L's rate   L <- that limit    throughput_falls
    probing L = P + s: rate(L) >= (1 + g) rate(P)    keep L, probe again    throughput_rises
    probing, no such gain                            L <- P, wait `probe_every`   no_gain
    r < u, binding, probe due                        L <- L + s, s = max(1, ceil(p x L))  probe
    otherwise                                        hold                   steady
and finally L <- clamp(L, floor, ceiling). Defaults: u = 0.9, m = 0.5, t = 0.9, g = 0.02, p = 0.15.

Why each rule:
- Not binding: a limit that holds nothing back has produced no evidence about itself, so quiet
  periods and traffic that bypasses the gateway cannot move it.
- Infeasible: when a clearly lower limit did not lower latency (r' >= t x r), the latency is a floor
  the limit does not control (a busy front end, other traffic); every further cut only starves the
  engine, so the limit goes to where it delivered most and the floor is reported. The engine's own
  TTFT histogram tells the same without any cut: what the proxy sees beyond it is spent outside.
- Secant cut: with r measured at two limits the linear interpolation gives the limit where r = 1,
  which is exact for a linear latency curve and conservative on a convex one; without a second point
  latency is assumed proportional to L (L / r), never more than halving per tick.
- Throughput decides where latency has room: KV saturation and preemptions are costs only when the
  measured rate or P90 shows them, so the limit climbs past them while the rate still rises by g.
- Probes of p x L, kept only for a gain of g and otherwise undone for `probe_every` seconds, keep
  the ledger fresh (so a capacity change is followed) while the limit stays within about p of its
  mean; the ledger forgets entries after `memory` seconds, which re-tests an infeasible verdict.
- A limit's rate counts only from `settle` seconds after it took effect (at least the median e2e
  latency, so non-streaming requests started under the previous limit have finished), and a probe
  is judged after `probe_dwell` seconds of measurement.
- Evidence: a cut needs min_samples values behind the P90 or values so clearly over target that a
  P90 at the target would rarely give them (`quantile_exceeds`, alpha = `evidence_alpha`).
Sources: DESIGN.md section 3; BBR's probing cycle (Cardwell et al., ACM Queue 2016); Envoy's
adaptive concurrency filter (epochs); Netflix concurrency-limits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from gateway.limits.base import Params, clamp, decide, is_binding, quantile_exceeds, worst_ratio
from gateway.limits.ledger import Entry, Ledger
from gateway.types import SLA, Decision, Observation, Signal


class SLALimit:
    name = "sla"
    respects_kv_ceiling = False
    """KV pressure counts only as it shows in the measured rate and P90s."""

    def __init__(
        self,
        sla: SLA,
        *,
        initial: int = 8,
        increase_below: float = 0.9,
        max_decrease: float = 0.5,
        floor_tolerance: float = 0.75,
        min_gain: float = 0.03,
        probe_gain: float = 0.1,
        probe_every: float = 10.0,
        probe_dwell: float = 4.0,
        settle: float = 2.0,
        half_life: float = 10.0,
        memory: float = 30.0,
        floor_memory: float = 120.0,
        evidence_alpha: float = 0.01,
    ) -> None:
        if probe_dwell > memory:
            raise ValueError("algorithm 'sla': 'probe_dwell' must be <= 'memory'")
        self.sla = sla
        self.initial = initial
        self.increase_below = increase_below
        self.max_decrease = max_decrease
        self.floor_tolerance = floor_tolerance
        self.min_gain = min_gain
        self.probe_gain = probe_gain
        self.probe_every = probe_every
        self.probe_dwell = probe_dwell
        self.settle = settle
        self.evidence_alpha = evidence_alpha
        self.ledger = Ledger(half_life, memory)
        self._probe_from: int | None = None
        self._next_probe_at = -math.inf
        self._step = 0
        """The next probe's step when the last one gained in proportion (slow start); 0 otherwise."""
        self.floor_memory = floor_memory
        self._floor_found: tuple[dict[Signal, float], float] | None = None
        """The latency floor last proven and until when it stands without new proof."""

    @classmethod
    def from_params(cls, params: Mapping[str, object], sla: SLA) -> SLALimit:
        p = Params(cls.name, params)
        memory = p.number("memory", 30.0, low=0.0, low_open=True)
        algo = cls(
            sla,
            initial=p.integer("initial", 8, low=1),
            increase_below=p.number("increase_below", 0.9, low=0.0, high=1.0, low_open=True),
            max_decrease=p.number("max_decrease", 0.5, low=0.0, high=0.9, low_open=True),
            floor_tolerance=p.number("floor_tolerance", 0.75, low=0.0, high=1.0, low_open=True),
            min_gain=p.number("min_gain", 0.03, low=0.0),
            probe_gain=p.number("probe_gain", 0.1, low=0.0, high=1.0, low_open=True),
            probe_every=p.number("probe_every", 10.0, low=0.0),
            probe_dwell=p.number("probe_dwell", 4.0, low=0.0, low_open=True),
            settle=p.number("settle", 2.0, low=0.0),
            half_life=p.number("half_life", 10.0, low=0.0, high=memory, low_open=True),
            memory=memory,
            floor_memory=p.number("floor_memory", 120.0, low=0.0),
            evidence_alpha=p.number("evidence_alpha", 0.01, low=0.0, high=1.0),
        )
        p.finish()
        return algo

    def initial_limit(self, floor: int, ceiling: int) -> int:
        return clamp(self.initial, floor, ceiling)

    def update(self, obs: Observation) -> Decision:
        decision = self._decide(obs)
        found = self._floor_found
        if decision.latency_floor is None and found is not None and obs.now < found[1]:
            decision = replace(decision, latency_floor=found[0])
        return decision

    def _decide(self, obs: Observation) -> Decision:
        signal, ratio = worst_ratio(obs, self.sla)
        if not is_binding(obs):
            # A limit that holds nothing back has produced no evidence about itself.
            self._probe_from = None
            return decide(
                obs, obs.limit, "not_binding", f"peak inflight {obs.peak_inflight} < limit {obs.limit}"
            )
        if obs.interval > 0 and obs.since_change >= self._settle(obs):
            self.ledger.record_rate(obs.now, obs.limit, obs.delivered_tokens, obs.interval)
        over, over_ratio = self._over_target(obs)
        if over is not None:
            self.ledger.record_ratio(obs.now, obs.limit, over_ratio, obs.p90[over])
            return self._over(obs, over, over_ratio)
        if signal is not None and self._evident(obs):
            self.ledger.record_ratio(obs.now, obs.limit, ratio, obs.p90[signal])
            if ratio <= 1.0:
                self._floor_found = None
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
        floor = self._floor(obs, signal)
        if floor is not None:
            return self._infeasible(obs, floor)
        self._probe_from = None
        limit = obs.limit
        lower = self.ledger.below(obs.now, limit)
        if lower is not None and lower.ratio is not None and lower.ratio < r:
            wanted = limit - (r - 1.0) * (limit - lower.limit) / (r - lower.ratio)
            how = f"between {lower.limit} ({lower.ratio:.2f}x) and {limit} ({r:.2f}x)"
        else:
            wanted = limit / r
            how = f"{limit} / {r:.2f}"
        wanted = max(wanted, limit * (1.0 - self.max_decrease))
        return decide(
            obs,
            min(limit - 1, math.floor(wanted)),
            "p90_over_target",
            f"{signal} P90 {obs.p90[signal]:.3f}s is {r:.2f}x its target on "
            f"{obs.counts.get(signal, 0)} values: to where it meets it, {how}",
        )

    def _infeasible(self, obs: Observation, floor: dict[Signal, float]) -> Decision:
        """No limit meets the SLA: go where the most was delivered, and keep probing for more."""
        text = ", ".join(f"{s} {v:.3f}s" for s, v in floor.items())
        d = self._climb_rate(obs)
        limit, detail = d.limit, d.detail
        return decide(obs, limit, "sla_infeasible", f"latency floor {text} over target; {detail}", floor)

    def _floor(self, obs: Observation, signal: Signal) -> dict[Signal, float] | None:
        """The latency the limit does not bring under target, if measured; else None.

        Proven by the front end's own delay (proxy TTFT P90 - the engine's TTFT P90) over target, or
        by the ledger: its lowest limit misses the target and is the floor, or a line through its
        lowest and highest limits (at least 1 / t apart) misses it at the floor.
        Remembered for `floor_memory` seconds, or until a P90 meets its target.
        """
        target = self.sla.target(signal)
        assert target is not None
        sig = obs.signals
        found: dict[Signal, float] | None = None
        if (
            signal == "ttft"
            and sig is not None
            and sig.ttft_p90 is not None
            and sig.at > obs.now - 2 * obs.interval
        ):
            outside = obs.p90["ttft"] - sig.ttft_p90
            if outside >= target:
                found = {"ttft": outside}
        entries = [e for e in self.ledger.fresh(obs.now) if e.ratio is not None]
        if found is None and entries and _misses(entries[0]):
            low, high = entries[0], entries[-1]
            assert low.ratio is not None and high.ratio is not None
            proven = low.limit <= obs.floor
            if high.limit >= low.limit / self.floor_tolerance:
                slope = (high.ratio - low.ratio) / (high.limit - low.limit)
                proven = proven or low.ratio - slope * (low.limit - obs.floor) > 1.0
            if proven:
                found = {signal: min(e.p90 for e in entries if e.p90 is not None)}
        if found is not None:
            self._floor_found = (found, obs.now + self.floor_memory)
        elif self._floor_found is not None and obs.now < self._floor_found[1]:
            found = self._floor_found[0]
        return found

    def _over_target(self, obs: Observation) -> tuple[Signal | None, float]:
        """The signal furthest over its target among those with the evidence to cut on."""

        def evident(signal: Signal, target: float) -> bool:
            return obs.counts.get(signal, 0) >= obs.min_samples or quantile_exceeds(
                obs.values.get(signal, ()), target, 0.9, self.evidence_alpha
            )

        signal, ratio = worst_ratio(obs, self.sla, admit=evident)
        return (signal, ratio) if ratio > 1.0 else (None, ratio)

    # -- within target ---------------------------------------------------------------------------

    def _climb(self, obs: Observation, r: float) -> Decision:
        """Within target: grow while latency has room, unless a lower limit delivered clearly more."""
        now, limit = obs.now, obs.limit
        here = self.ledger.get(limit)
        best = self.ledger.best(now, self.probe_dwell)
        measured = here is not None and here.seconds >= self.probe_dwell and now - here.at <= obs.interval
        if (
            measured
            and here is not None
            and best is not None
            and best.limit < limit
            and self._gain(best, here)
        ):
            self._next_probe_at = now + self.probe_every
            lower = max(best.limit, limit - self._step_size(limit))
            return decide(obs, lower, "throughput_falls", _compare(best, here))
        if r < self.increase_below and self._may_grow(obs):
            room = math.floor(limit * (self.increase_below / r - 1.0)) if r > 0 else limit
            step = max(self._step_size(limit), min(room, math.ceil(math.sqrt(limit))))
            known = [
                e.limit
                for e in self.ledger.fresh(now)
                if e.limit > limit and e.ratio is not None and e.ratio >= self.increase_below
            ]
            step = min(step, obs.ceiling - limit, min(known, default=obs.ceiling) - 1 - limit)
            if step > 0:
                return decide(
                    obs, limit + step, "probe", f"worst P90/target {r:.2f} < {self.increase_below:g}: +{step}"
                )
        return decide(obs, limit, "steady", f"worst P90/target {r:.2f}")

    def _climb_rate(self, obs: Observation) -> Decision:
        """Latency cannot be met: probe upward and keep a step only if the rate rose by g."""
        now, limit = obs.now, obs.limit
        here = self.ledger.get(limit)
        measured = here is not None and here.seconds >= self.probe_dwell and now - here.at <= obs.interval
        if self._probe_from is None:
            best = self.ledger.best(now, self.probe_dwell)
            if (
                best is not None
                and best.limit != limit
                and (not measured or here is None or self._gain(best, here))
            ):
                self._next_probe_at = now + self.probe_every
                return decide(
                    obs, best.limit, "throughput_falls", "holding the limit with the most throughput"
                )
            if self._may_grow(obs):
                step = min(max(self._step, self._step_size(limit)), obs.ceiling - limit)
                self._probe_from = limit
                return decide(obs, limit + step, "probe", f"trying {limit + step}")
            return decide(obs, limit, "steady", "holding the limit with the most throughput")
        start = self.ledger.get(self._probe_from)
        if not measured or here is None:
            return decide(obs, limit, "probing", f"measuring {limit} against {self._probe_from}")
        if start is None or self._gain(here, start):
            # Slow start: a gain of half the proportional one doubles the next step.
            strong = start is None or here.rate >= start.rate * (
                1.0 + 0.5 * (limit - start.limit) / start.limit
            )
            self._step = 2 * (limit - self._probe_from) if strong else 0
            self._probe_from = None
            return decide(obs, limit, "probe", "" if start is None else _compare(here, start))
        back, self._probe_from, self._step = self._probe_from, None, 0
        self._next_probe_at = now + self.probe_every
        return decide(obs, back, "no_gain", _compare(start, here))

    def _may_grow(self, obs: Observation) -> bool:
        return (
            self._evident(obs)
            and obs.since_change >= self._settle(obs)
            and obs.now >= self._next_probe_at
            and obs.limit < obs.ceiling
        )

    def _step_size(self, limit: int) -> int:
        return max(1, round(self.probe_gain * limit))

    def _evident(self, obs: Observation) -> bool:
        """Whether some SLA signal is measured and each measured one stands on min_samples values."""
        measured = [s for s in self.sla.targets() if s in obs.p90]
        return bool(measured) and all(obs.counts.get(s, 0) >= obs.min_samples for s in measured)

    def _gain(self, a: Entry, b: Entry) -> bool:
        """Whether `a` delivered clearly more than `b`."""
        return a.rate > (1.0 + self.min_gain) * b.rate

    def _settle(self, obs: Observation) -> float:
        return max(self.settle, obs.p50.get("e2e", 0.0))


def _misses(entry: Entry) -> bool:
    return entry.ratio is not None and entry.ratio > 1.0 and entry.p90 is not None


def _compare(a: Entry, b: Entry) -> str:
    return f"{a.limit} delivered {a.rate:.0f} tok/s, {b.limit} {b.rate:.0f} tok/s"
