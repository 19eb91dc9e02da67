"""AIMD: additive increase, multiplicative decrease, as TCP congestion avoidance.

Math, once per control tick with limit L:
    if preemptions since the last tick, or worst P90/target > 1:   L <- max(floor, L * backoff)
    elif the limit was binding (peak inflight >= L or requests queued):   L <- L + increase
    else:   L unchanged

Source: Chiu and Jain, "Analysis of the Increase and Decrease Algorithms for Congestion Avoidance
in Computer Networks" (1989), which shows AIMD converges to a fair, efficient share; and Netflix
concurrency-limits' `AIMDLimit` (backoff ratio 0.9 by default, increase only while the limit is in
use). Here the "drop" that triggers backoff is an SLA breach or a vLLM preemption, not a timeout.
Unlike the SLA-setpoint controller the backoff does not depend on how far P90 is over target.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.control.algorithms.base import Params, clamp, decide, is_binding, worst_ratio
from gateway.types import SLA, Decision, Observation


class AIMDLimit:
    name = "aimd"
    respects_kv_ceiling = True

    def __init__(self, sla: SLA, *, initial: int = 8, increase: int = 1, backoff: float = 0.9) -> None:
        self.sla = sla
        self.initial = initial
        self.increase = increase
        self.backoff = backoff

    @classmethod
    def from_params(cls, params: Mapping[str, object], sla: SLA) -> AIMDLimit:
        p = Params(cls.name, params)
        initial = p.integer("initial", 8, low=1)
        increase = p.integer("increase", 1, low=1)
        backoff = p.number("backoff", 0.9, low=0.0, high=0.99, low_open=True)
        p.finish()
        return cls(sla, initial=initial, increase=increase, backoff=backoff)

    def initial_limit(self, floor: int, ceiling: int) -> int:
        return clamp(self.initial, floor, ceiling)

    def update(self, obs: Observation) -> Decision:
        lowered = min(obs.limit - 1, int(obs.limit * self.backoff))
        if obs.preemptions_delta > 0:
            return decide(
                obs,
                lowered,
                "preemptions",
                f"{obs.preemptions_delta:g} preemptions: {obs.limit} x {self.backoff:g}",
            )
        if obs.sample_count < obs.min_samples:
            return decide(
                obs,
                obs.limit,
                "insufficient_samples",
                f"{obs.sample_count} of {obs.min_samples} samples since the last change",
            )
        signal, ratio = worst_ratio(obs, self.sla)
        if signal is not None and ratio > 1.0:
            return decide(
                obs,
                lowered,
                "p90_over_target",
                f"{signal} P90 {obs.p90[signal]:.3f}s is {ratio:.2f}x target: {obs.limit} x {self.backoff:g}",
            )
        if not is_binding(obs):
            return decide(
                obs,
                obs.limit,
                "not_binding",
                f"peak inflight {obs.peak_inflight} < limit {obs.limit}, nothing queued",
            )
        if obs.limit >= obs.ceiling:
            return decide(obs, obs.limit, "at_ceiling", f"limit at ceiling {obs.ceiling}")
        return decide(
            obs,
            obs.limit + self.increase,
            "headroom",
            f"binding and worst P90/target {ratio:.2f} <= 1: +{self.increase}",
        )
