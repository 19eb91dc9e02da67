"""Gradient controller after Envoy's adaptive concurrency filter, with an LLM notion of RTT.

Envoy's math (envoyproxy.io, docs/envoy/latest/configuration/http/http_filters/
adaptive_concurrency_filter, "Gradient Controller"):

    gradient  = (minRTT + B) / sampleRTT,   B = minRTT * buffer_pct   (buffer default 25%)
    gradient is kept within [0.5, 2.0]      (the filter's `gradient` gauge ranges 500..2000 / 1000)
    limit_new = gradient * limit_old + headroom,  headroom = sqrt(limit)

sampleRTT is a percentile (here P90) of the latencies sampled in one update window; minRTT is
measured periodically by pinning the limit to a small `min_concurrency` (default 3) until
`request_count` samples are in, and is also re-measured when the limit has sat at that minimum for
5 consecutive windows. We take sqrt of the gradient-scaled limit, as Envoy's controller does.

What "RTT" means for an LLM: a whole request's latency is dominated by how many tokens it generates,
so raw end-to-end latency mixes load with request size. We use, by default, end-to-end seconds per
output token (`rtt = "e2e_per_token"`): it grows with decode batch size (memory-bound step time) and
with queueing before the first token (amortised over the output), and is comparable across requests
of different lengths. `rtt = "tpot"` (pure decode pressure) and `rtt = "ttft"` (queue + prefill) are
available for traffic where one of them is the better congestion signal.

Differences from Envoy, chosen for LLM serving: the minRTT probe needs far fewer samples (default 8,
since one LLM request can take seconds and the probe starves the backend meanwhile), and the probe
restores the limit that was in force before it. Like Envoy, the controller knows nothing about the
SLA: it settles where latency is about (1 + buffer) x the no-load latency.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from gateway.control.algorithms.base import Params, clamp, decide
from gateway.types import SLA, Decision, Observation

RTT_CHOICES = ("e2e_per_token", "tpot", "ttft")
FLOOR_WINDOWS_BEFORE_REMEASURE = 5


class GradientLimit:
    name = "gradient"
    respects_kv_ceiling = True

    def __init__(
        self,
        *,
        rtt: str = "e2e_per_token",
        buffer: float = 0.25,
        min_concurrency: int = 3,
        min_rtt_interval: float = 60.0,
        min_rtt_samples: int = 8,
        min_gradient: float = 0.5,
        max_gradient: float = 2.0,
    ) -> None:
        self.rtt = rtt
        self.buffer = buffer
        self.min_concurrency = min_concurrency
        self.min_rtt_interval = min_rtt_interval
        self.min_rtt_samples = min_rtt_samples
        self.min_gradient = min_gradient
        self.max_gradient = max_gradient
        self.min_rtt: float | None = None
        self._probing = True
        self._restore_to: int | None = None
        self._next_probe_at: float | None = None
        self._floor_windows = 0

    @classmethod
    def from_params(cls, params: Mapping[str, object], sla: SLA) -> GradientLimit:
        p = Params(cls.name, params)
        algo = cls(
            rtt=p.choice("rtt", "e2e_per_token", RTT_CHOICES),
            buffer=p.number("buffer", 0.25, low=0.0),
            min_concurrency=p.integer("min_concurrency", 3, low=1),
            min_rtt_interval=p.number("min_rtt_interval", 60.0, low=0.0),
            min_rtt_samples=p.integer("min_rtt_samples", 8, low=1),
        )
        p.finish()
        return algo

    def initial_limit(self, floor: int, ceiling: int) -> int:
        return clamp(self.min_concurrency, floor, ceiling)

    def sample_rtt(self, obs: Observation) -> float | None:
        if self.rtt == "e2e_per_token":
            return obs.p90_e2e_per_token
        return obs.p90.get("ttft" if self.rtt == "ttft" else "tpot")

    def update(self, obs: Observation) -> Decision:
        rtt = self.sample_rtt(obs)
        if self._probing:
            if obs.sample_count >= self.min_rtt_samples and rtt is not None and rtt > 0:
                self.min_rtt = rtt
                self._probing = False
                self._floor_windows = 0
                self._next_probe_at = obs.now + self.min_rtt_interval if self.min_rtt_interval > 0 else None
                restore = self._restore_to if self._restore_to is not None else obs.limit
                self._restore_to = None
                return decide(obs, restore, "min_rtt_measured", f"minRTT {rtt:.4f}s ({self.rtt})")
            return decide(
                obs,
                self.min_concurrency,
                "measuring_min_rtt",
                f"{obs.sample_count} of {self.min_rtt_samples} samples at limit {self.min_concurrency}",
            )
        due = self._next_probe_at is not None and obs.now >= self._next_probe_at
        if due or self._floor_windows >= FLOOR_WINDOWS_BEFORE_REMEASURE:
            self._probing = True
            self._restore_to = obs.limit
            return decide(
                obs,
                self.min_concurrency,
                "measuring_min_rtt",
                "periodic minRTT measurement" if due else "limit stuck at the minimum",
            )
        if obs.sample_count < obs.min_samples or rtt is None or rtt <= 0:
            return decide(
                obs,
                obs.limit,
                "insufficient_samples",
                f"{obs.sample_count} of {obs.min_samples} samples since the last change",
            )
        assert self.min_rtt is not None
        raw = self.min_rtt * (1.0 + self.buffer) / rtt
        gradient = min(self.max_gradient, max(self.min_gradient, raw))
        scaled = gradient * obs.limit
        wanted = scaled + math.sqrt(scaled)
        decision = decide(
            obs,
            wanted,
            "gradient" if gradient < 1.0 else "headroom",
            f"minRTT {self.min_rtt:.4f}s sampleRTT {rtt:.4f}s gradient {gradient:.2f}: "
            f"{gradient:.2f} x {obs.limit} + {math.sqrt(scaled):.1f}",
        )
        if decision.limit <= self.min_concurrency:
            self._floor_windows += 1
        else:
            self._floor_windows = 0
        return decision
