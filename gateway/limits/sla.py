"""SLA-setpoint controller: hold the worst P90/target ratio just under 1 while keeping work queued.

Math, once per control tick with limit L, floor F, ceiling C, and r = max over SLA signals of
P90_window / target (P90 over requests dispatched since the limit last changed):

    too few samples since the last change         hold                        insufficient_samples
    preemptions since the last tick > t_p x completed requests
                                                  L <- L * b_p                preemptions
    r > 1                                         L <- L * max(m, 1/(1+g(r-1)))  p90_over_target
    KV usage >= h and backend waiting > w         L <- L * b_kv               kv_saturated
    backend waiting > w                           L <- min(L-1, running + w)  backend_queueing
    r >= u (between u and 1)                      hold                        steady
    limit not binding (peak < L, none queued)     hold                        not_binding
    L = C                                         hold                        at_ceiling
    KV usage >= h                                 hold                        kv_saturated
    otherwise (binding and r < u)                 L <- L + s; if r < u_fast: L <- 2L before the
                                                  first decrease (slow start), L + ceil(sqrt(L))
                                                  once T_fast s have passed without one  headroom
and finally L <- clamp(L, F, C). Every decrease moves at least one step.

Defaults: g = 1 (so L / r: the limit latency would have if it grew linearly with concurrency;
convex TTFT overshoots safely low), m = 0.5 (never more than halve per tick), u = 0.9, u_fast = 0.5,
T_fast = 15 s, s = 1, b_p = 0.85, t_p = 0.1, b_kv = 0.9, h = 0.95, w = 1.

Why these moves: the window P90 is a noisy, lagging, strongly convex function of concurrency past
the KV knee (a vLLM CPU engine with 8,192 KV tokens: TTFT P90 0.06 s at 16 concurrent, 0.6 s at 20,
1.8 s at 24), so decreases are multiplicative and proportional to the overshoot while increases are
additive, only while the limit is actually holding traffic back (otherwise a quiet period would
ratchet the limit up with no evidence), with a dead band [u, 1] so the loop settles instead of
hunting. Preemptions (`vllm:num_preemptions_total` rising) and a full KV cache with requests waiting
inside vLLM are direct evidence of overcommit and act before latency shows it. Discarding samples
from before a change (done by the limiter) is the epoch rule of Envoy's adaptive concurrency filter.
Far under target, the climb is fast. Like TCP's slow start, the limit doubles per tick until the
first sign of congestion (a cold gateway in front of a real vLLM CPU engine otherwise spent most of a
20-second overload climbing from 8 and delivered 87% of the direct throughput); after a decrease the
fast step is Envoy's gradient-controller headroom sqrt(L), allowed once T_fast seconds have passed
without another decrease (with it right after a decrease, a simulated engine at 3x overload swung
between 12 and 18 instead of settling; with T_fast = 60 s the limit needed more than a minute to
climb back after capacity returned, longer than a capacity dip usually lasts).
The evidence needed before acting (min_samples, 20 by default in the gateway's config) matters as
much as the gains: with 8 samples the nearest-rank P90 is the largest sample, so a single stalled
request halved the limit in the scenario benchmark.
The band's lower edge u = 0.9 rather than 0.8: with a TPOT target on the simulated CPU engine,
u = 0.8 settled at limit 11 (P90 at 0.80 of target, 1,714 tok/s), u = 0.9 at 14 (0.94, 1,860 tok/s).
Preemptions are tolerated up to t_p per finished request (one in ten) because vLLM's recompute
preemption at a low rate costs little: on the simulated CPU engine at 3x overload, backing off on
any preemption settled at 14.2 (1,851 tok/s), t_p = 0.1 at 14.5 (1,884 tok/s, fixed 16: 1,898).
Sources: DESIGN.md section 3; Envoy adaptive_concurrency filter docs; Netflix concurrency-limits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from gateway.limits.base import Params, clamp, decide, is_binding, worst_ratio
from gateway.types import SLA, Decision, Direction, Observation


class SLALimit:
    name = "sla"
    respects_kv_ceiling = True

    def __init__(
        self,
        sla: SLA,
        *,
        initial: int = 8,
        increase_step: int = 1,
        increase_below: float = 0.9,
        fast_increase_below: float = 0.5,
        decrease_gain: float = 1.0,
        max_decrease: float = 0.5,
        preemption_backoff: float = 0.85,
        kv_high_water: float = 0.95,
        kv_backoff: float = 0.9,
        waiting_tolerance: float = 1.0,
        fast_increase_after: float = 15.0,
        preemption_tolerance: float = 0.1,
    ) -> None:
        if not 0.0 <= fast_increase_below <= increase_below <= 1.0:
            raise ValueError(
                "algorithm 'sla': parameters must satisfy 0 <= 'fast_increase_below' <= 'increase_below' <= 1"
            )
        self.sla = sla
        self.initial = initial
        self.increase_step = increase_step
        self.increase_below = increase_below
        self.fast_increase_below = fast_increase_below
        self.decrease_gain = decrease_gain
        self.max_decrease = max_decrease
        self.preemption_backoff = preemption_backoff
        self.kv_high_water = kv_high_water
        self.kv_backoff = kv_backoff
        self.waiting_tolerance = waiting_tolerance
        self.fast_increase_after = fast_increase_after
        self.preemption_tolerance = preemption_tolerance
        self._last_decrease_at: float | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, object], sla: SLA) -> SLALimit:
        p = Params(cls.name, params)
        algo = cls(
            sla,
            initial=p.integer("initial", 8, low=1),
            increase_step=p.integer("increase_step", 1, low=1),
            increase_below=p.number("increase_below", 0.9, low=0.0, high=1.0, low_open=True),
            fast_increase_below=p.number("fast_increase_below", 0.5, low=0.0, high=1.0),
            decrease_gain=p.number("decrease_gain", 1.0, low=0.0, low_open=True),
            max_decrease=p.number("max_decrease", 0.5, low=0.0, high=0.9, low_open=True),
            preemption_backoff=p.number("preemption_backoff", 0.85, low=0.0, high=0.99, low_open=True),
            kv_high_water=p.number("kv_high_water", 0.95, low=0.0, high=1.0, low_open=True),
            kv_backoff=p.number("kv_backoff", 0.9, low=0.0, high=0.99, low_open=True),
            waiting_tolerance=p.number("waiting_tolerance", 1.0, low=0.0),
            fast_increase_after=p.number("fast_increase_after", 15.0, low=0.0),
            preemption_tolerance=p.number("preemption_tolerance", 0.1, low=0.0),
        )
        p.finish()
        return algo

    def initial_limit(self, floor: int, ceiling: int) -> int:
        return clamp(self.initial, floor, ceiling)

    def update(self, obs: Observation) -> Decision:
        decision = self._decide(obs)
        if decision.direction is Direction.DOWN:
            self._last_decrease_at = obs.now
        return decision

    def _fast_allowed(self, now: float) -> bool:
        last = self._last_decrease_at
        return last is None or now - last >= self.fast_increase_after

    def _decide(self, obs: Observation) -> Decision:
        limit = obs.limit
        if obs.sample_count < obs.min_samples:
            pending = (
                f"; {obs.preemptions_delta:g} preemptions wait for evidence"
                if obs.preemptions_delta > 0
                else ""
            )
            return decide(
                obs,
                limit,
                "insufficient_samples",
                f"{obs.sample_count} of {obs.min_samples} samples since the last change{pending}",
            )
        if obs.preemptions_delta > self.preemption_tolerance * obs.completed:
            return decide(
                obs,
                _lower(limit, limit * self.preemption_backoff),
                "preemptions",
                f"{obs.preemptions_delta:g} preemptions since last tick: "
                f"{limit} x {self.preemption_backoff:g}",
            )
        signal, ratio = worst_ratio(obs, self.sla)
        if signal is not None and ratio > 1.0:
            factor = max(1.0 - self.max_decrease, 1.0 / (1.0 + self.decrease_gain * (ratio - 1.0)))
            return decide(
                obs,
                _lower(limit, limit * factor),
                "p90_over_target",
                f"{signal} P90 {obs.p90[signal]:.3f}s is {ratio:.2f}x its target "
                f"{self.sla.targets()[signal]:g}s: {limit} x {factor:.2f}",
            )
        sig = obs.signals
        kv = sig.kv_usage if sig is not None else None
        waiting = (sig.waiting if sig is not None else None) or 0.0
        kv_high = kv is not None and kv >= self.kv_high_water
        if waiting > self.waiting_tolerance:
            if kv_high:
                return decide(
                    obs,
                    _lower(limit, limit * self.kv_backoff),
                    "kv_saturated",
                    f"KV usage {kv:.2f} >= {self.kv_high_water:g} with {waiting:g} waiting: "
                    f"{limit} x {self.kv_backoff:g}",
                )
            running = sig.running if sig is not None else None
            target = limit - 1 if running is None else running + self.waiting_tolerance
            return decide(
                obs,
                _lower(limit, target),
                "backend_queueing",
                f"backend queues {waiting:g} requests with {running} running",
            )
        p90_text = f"worst P90/target {ratio:.2f}" if signal is not None else "no SLA signal"
        if ratio >= self.increase_below:
            return decide(obs, limit, "steady", f"{p90_text} within [{self.increase_below:g}, 1]")
        if not is_binding(obs):
            return decide(
                obs,
                limit,
                "not_binding",
                f"peak inflight {obs.peak_inflight} < limit {limit}, nothing queued",
            )
        if limit >= obs.ceiling:
            return decide(obs, limit, "at_ceiling", f"limit at ceiling {obs.ceiling}")
        if kv_high:
            return decide(obs, limit, "kv_saturated", f"KV usage {kv:.2f} >= {self.kv_high_water:g}")
        step = self.increase_step
        if ratio < self.fast_increase_below:
            if self._last_decrease_at is None:
                step = max(step, limit)  # slow start: double until the first congestion
            elif self._fast_allowed(obs.now):
                step = max(step, math.ceil(math.sqrt(limit)))
        return decide(
            obs, limit + step, "headroom", f"binding, {p90_text} < {self.increase_below:g}: +{step}"
        )


def _lower(limit: int, wanted: float) -> int:
    """A decrease that always moves at least one step, whatever the rounding."""
    return min(limit - 1, math.floor(wanted))
