"""SLA-setpoint controller: hold the worst P90/target ratio just under 1 while keeping work queued.

Math, once per control tick with limit L, floor F, ceiling C, and per SLA signal the ratio
P90_window / target (P90 over requests dispatched since the limit last changed, newest 32, and
streams in flight). r_n is the worst ratio among signals with the evidence to cut on (at least
n = min_samples values, or values clearly over the target, below), r the worst among all measured:

    too few samples since the last change, r_n <= 1  hold                     insufficient_samples
    preemptions since the last tick > t_p x completed requests
                                                  L <- L * b_p                preemptions
    r_n > 1                                       L <- L * max(m, 1/(1+g(r_n-1)))  p90_over_target
    KV usage >= h and backend waiting > w         L <- L * b_kv               kv_saturated
    backend waiting > w, two scrapes in a row     L <- min(L-1, running + w)  backend_queueing
    r > 1 (without the evidence to cut)           hold                        insufficient_samples
    r >= u (between u and 1)                      hold                        steady
    limit not binding (peak < L, none queued)     hold                        not_binding
    L = C                                         hold                        at_ceiling
    KV usage >= h                                 hold                        kv_saturated
    binding, r < u_ss, never decreased            L <- 2L  (slow start)       headroom
    otherwise (binding and r < u)                 L <- L + max(s, min(floor(L(u/r - 1)),
                                                                      ceil(sqrt(L))))  headroom
and finally L <- clamp(L, F, C). Every decrease moves at least one step.

Defaults: g = 1 (so L / r: the limit latency would have if it grew linearly with concurrency;
convex TTFT overshoots safely low), m = 0.5 (never more than halve per tick), u = 0.9,
u_ss = 0.7, s = 1, b_p = 0.85, t_p = 0.3, b_kv = 0.9, h = 0.95, w = 1.

Why these moves: the window P90 is a noisy, lagging, strongly convex function of concurrency past
the KV knee (a vLLM CPU engine with 8,192 KV tokens: TTFT P90 0.06 s at 16 concurrent, 0.6 s at 20,
1.8 s at 24), so decreases are multiplicative and proportional to the overshoot, increases happen
only while the limit is actually holding traffic back (otherwise a quiet period would ratchet the
limit up with no evidence), and a dead band [u, 1] lets the loop settle instead of hunting.
Preemptions (`vllm:num_preemptions_total` rising) and a full KV cache with requests waiting
inside vLLM are direct evidence of overcommit and act before latency shows it. Discarding samples
from before a change (done by the limiter) is the epoch rule of Envoy's adaptive concurrency filter.

The increase is the distance to the band's lower edge if P90 grew in proportion to L, capped by
Envoy's gradient-controller headroom sqrt(L). Proportional growth underestimates the room when
latency has a large floor (TPOT on the simulated engine: 15 ms at 8 in flight, 25 ms at 16, so
r = 0.67 at 8 asks for +3, not +9), which keeps the step cautious, and the sqrt(L) cap bounds the
overshoot where latency is convex. With a fixed +1 instead, the limit took 15 s to climb from 8 to
13 after a cold start or a capacity dip, and adaptive goodput in the scenario benchmark was 86-89%
of the best fixed limit where capacity changed; with this step, 98-102% (docs/benchmarks.md).
Like TCP's slow start, a gateway that has never seen congestion doubles while r < u_ss (a cold
gateway in front of a real vLLM CPU engine otherwise spent most of a 20-second overload climbing
from 8). u_ss = 0.7, not 0.9: at 0.9 the doubling in the scenario benchmark went on past the
knee (summed limit 38 where 32 is best) and goodput fell to 8.1 and 10.6 requests/s in (b) and (c),
against 9.9 and 12.3 with 0.7 (the former measured with the earlier +1 step).

The evidence needed before acting (min_samples, 20 by default in the gateway's config) matters as
much as the gains: with 8 samples the nearest-rank P90 is the largest sample, so a single stalled
request halved the limit in the scenario benchmark. It is counted per signal for a decrease: a
request's TTFT arrives with its first token but its TPOT only when it ends, so soon after a change
the TPOT values are those of the few requests that ended first, and a P90 of three values is their
largest. An increase heeds every measured signal, however few its values (on few values the
nearest-rank P90 is the largest, the cautious reading). Requiring min_samples of every signal for
an increase as well made each step wait for 20 finished requests, and at a limit of 3 after a
capacity dip that took so long the limit never climbed back within the benchmark's 15 s phase.
A cut may also stand on fewer values when they are clear: if so many exceed the target that a
P90 at the target would give that many with probability under alpha = 0.01 (the count over target
is then Binomial(n, 0.1): 3 of 3, 3 of 5, 4 of 8, 5 of 12). One stalled request among a few does not
qualify; a backend that slowed down for everyone does, at the next tick, because the limiter also
counts the pace of streams still in flight. After capacity halved in the scenario benchmark, the
second and third cuts each waited 4-5 s for 20 TPOT values while requests ran 1.3x over target.
vLLM's own queue (backend_queueing) must persist over two scrapes: the gateway hands out several
slots when the limit rises, those requests wait in vLLM until its next step admits them, and a
scrape taken in those milliseconds (the scrape and control loops share a period) undid every
increase in the 3x-overload scenario (limits oscillating 11-16 per backend; with the rule, 19).
The band's lower edge u = 0.9 rather than 0.8: with a TPOT target on the simulated CPU engine,
u = 0.8 settled at limit 11 (P90 at 0.80 of target, 1,714 tok/s), u = 0.9 at 14 (0.94, 1,860 tok/s).
Preemptions are tolerated up to t_p per finished request (three in ten). vLLM's recompute
preemption costs the victim a wait and a second prefill, and what that costs the clients shows in
the latency the rules above already watch; this rule is for thrash, which wastes the engine before
latency shows it. On the simulated CPU engine at 3x overload with a loose TTFT target, so that only
KV pressure binds (loadtests/bench_algorithms.py, virtual time, 48 clients, t = 50-150 s):
    t_p          0      0.1    0.3    0.5    1.0    (fixed 16, fixed 24)
    mean limit   14.9   15.4   16.4   17.6   17.7   (16, 24)
    tok/s        1,866  1,881  1,917  1,944  1,902  (1,902, 1,941)
    preemptions  83     105    168    247    269    (143, 568)
With mixed short and long requests (scenario (e) of docs/benchmarks.md), t_p = 0.1 cut 15% on one
or two preemptions in a tick of a few finished requests, and goodput was on average 5% higher with
0.3 (five seeds, same session). Counting the rate over more requests than one tick's (since the
last change, at least min_samples) did not help there: a mean 95.4% of fixed-16 over six seeds,
against 97.5% per tick.
Sources: DESIGN.md section 3; Envoy adaptive_concurrency filter docs; Netflix concurrency-limits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from gateway.limits.base import Params, clamp, decide, is_binding, quantile_exceeds, worst_ratio
from gateway.types import SLA, BackendSignals, Decision, Direction, Observation, Signal


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
        slow_start_below: float = 0.7,
        decrease_gain: float = 1.0,
        max_decrease: float = 0.5,
        preemption_backoff: float = 0.85,
        kv_high_water: float = 0.95,
        kv_backoff: float = 0.9,
        waiting_tolerance: float = 1.0,
        preemption_tolerance: float = 0.3,
        evidence_alpha: float = 0.01,
    ) -> None:
        if not 0.0 <= slow_start_below <= increase_below <= 1.0:
            raise ValueError(
                "algorithm 'sla': parameters must satisfy 0 <= 'slow_start_below' <= 'increase_below' <= 1"
            )
        self.sla = sla
        self.initial = initial
        self.increase_step = increase_step
        self.increase_below = increase_below
        self.slow_start_below = slow_start_below
        self.decrease_gain = decrease_gain
        self.max_decrease = max_decrease
        self.preemption_backoff = preemption_backoff
        self.kv_high_water = kv_high_water
        self.kv_backoff = kv_backoff
        self.waiting_tolerance = waiting_tolerance
        self.preemption_tolerance = preemption_tolerance
        self.evidence_alpha = evidence_alpha
        self._decreased = False
        self._scrape_at: float | None = None
        self._queued_now = False
        self._queued_before = False

    @classmethod
    def from_params(cls, params: Mapping[str, object], sla: SLA) -> SLALimit:
        p = Params(cls.name, params)
        algo = cls(
            sla,
            initial=p.integer("initial", 8, low=1),
            increase_step=p.integer("increase_step", 1, low=1),
            increase_below=p.number("increase_below", 0.9, low=0.0, high=1.0, low_open=True),
            slow_start_below=p.number("slow_start_below", 0.7, low=0.0, high=1.0),
            decrease_gain=p.number("decrease_gain", 1.0, low=0.0, low_open=True),
            max_decrease=p.number("max_decrease", 0.5, low=0.0, high=0.9, low_open=True),
            preemption_backoff=p.number("preemption_backoff", 0.85, low=0.0, high=0.99, low_open=True),
            kv_high_water=p.number("kv_high_water", 0.95, low=0.0, high=1.0, low_open=True),
            kv_backoff=p.number("kv_backoff", 0.9, low=0.0, high=0.99, low_open=True),
            waiting_tolerance=p.number("waiting_tolerance", 1.0, low=0.0),
            preemption_tolerance=p.number("preemption_tolerance", 0.3, low=0.0),
            evidence_alpha=p.number("evidence_alpha", 0.01, low=0.0, high=1.0),
        )
        p.finish()
        return algo

    def initial_limit(self, floor: int, ceiling: int) -> int:
        return clamp(self.initial, floor, ceiling)

    def update(self, obs: Observation) -> Decision:
        decision = self._decide(obs)
        if decision.direction is Direction.DOWN:
            self._decreased = True
        return decision

    def _decide(self, obs: Observation) -> Decision:
        limit = obs.limit
        over, over_ratio = self._over_target(obs)
        if obs.sample_count < obs.min_samples and over is None:
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
        if over is not None:
            factor = max(1.0 - self.max_decrease, 1.0 / (1.0 + self.decrease_gain * (over_ratio - 1.0)))
            return decide(
                obs,
                _lower(limit, limit * factor),
                "p90_over_target",
                f"{over} P90 {obs.p90[over]:.3f}s is {over_ratio:.2f}x its target "
                f"{self.sla.targets()[over]:g}s on {obs.counts.get(over, 0)} values: {limit} x {factor:.2f}",
            )
        sig = obs.signals
        kv = sig.kv_usage if sig is not None else None
        waiting = (sig.waiting if sig is not None else None) or 0.0
        kv_high = kv is not None and kv >= self.kv_high_water
        queueing = self._queueing(sig, waiting)
        if waiting > self.waiting_tolerance:
            if kv_high:
                return decide(
                    obs,
                    _lower(limit, limit * self.kv_backoff),
                    "kv_saturated",
                    f"KV usage {kv:.2f} >= {self.kv_high_water:g} with {waiting:g} waiting: "
                    f"{limit} x {self.kv_backoff:g}",
                )
            if queueing:
                running = sig.running if sig is not None else None
                target = limit - 1 if running is None else running + self.waiting_tolerance
                return decide(
                    obs,
                    _lower(limit, target),
                    "backend_queueing",
                    f"backend queues {waiting:g} requests with {running} running, two scrapes in a row",
                )
        # An increase also heeds the signals measured on fewer than min_samples requests: on so few,
        # the nearest-rank P90 is the largest value or next to it, the cautious reading.
        signal, ratio = worst_ratio(obs, self.sla)
        p90_text = f"worst P90/target {ratio:.2f}" if signal is not None else "no SLA signal"
        if signal is not None and ratio > 1.0:
            return decide(
                obs,
                limit,
                "insufficient_samples",
                f"{signal} P90 is {ratio:.2f}x its target on {obs.counts.get(signal, 0)} of "
                f"{obs.min_samples} values since the last change",
            )
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
        if ratio < self.slow_start_below and not self._decreased:
            step = max(self.increase_step, limit)  # slow start: double until the first congestion
        else:
            step = self._headroom_step(limit, ratio)
        return decide(
            obs, limit + step, "headroom", f"binding, {p90_text} < {self.increase_below:g}: +{step}"
        )

    def _over_target(self, obs: Observation) -> tuple[Signal | None, float]:
        """The signal furthest over its target among those with the evidence to cut on.

        Evidence: `min_samples` values behind the P90, or fewer values of which so many exceed the
        target that a P90 at the target would rarely produce them (`quantile_exceeds`).
        """

        def evident(signal: Signal, target: float) -> bool:
            return obs.counts.get(signal, 0) >= obs.min_samples or quantile_exceeds(
                obs.values.get(signal, ()), target, 0.9, self.evidence_alpha
            )

        signal, ratio = worst_ratio(obs, self.sla, admit=evident)
        return (signal, ratio) if ratio > 1.0 else (None, ratio)

    def _queueing(self, sig: BackendSignals | None, waiting: float) -> bool:
        """Whether vLLM's own queue held more than the tolerance in this scrape and the one before.

        One scrape is not enough: requests the gateway just dispatched (a limit increase hands out
        several slots at once) wait inside vLLM until its next step admits them, and a scrape taken
        in those milliseconds would undo every increase. A queue that persists from one scrape to
        the next is vLLM out of room.
        """
        if sig is None:
            return False
        if sig.at != self._scrape_at:
            self._scrape_at = sig.at
            self._queued_before, self._queued_now = self._queued_now, waiting > self.waiting_tolerance
        return self._queued_now and self._queued_before

    def _headroom_step(self, limit: int, ratio: float) -> int:
        """How far to grow: to where P90 would reach the band's edge if it grew in proportion to
        the limit, at least `increase_step` and at most Envoy's sqrt(L) headroom."""
        proportional = limit * (self.increase_below / ratio - 1.0) if ratio > 0 else math.inf
        return max(self.increase_step, min(math.floor(proportional), math.ceil(math.sqrt(limit))))


def _lower(limit: int, wanted: float) -> int:
    """A decrease that always moves at least one step, whatever the rounding."""
    return min(limit - 1, math.floor(wanted))
