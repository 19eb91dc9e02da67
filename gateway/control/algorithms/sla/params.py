"""The `sla` controller's parameters: each default and its bounds written once, as a field.

`SLAParams.from_mapping` reads them from config with the bounds checked and unknown keys refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.control.algorithms.base import param, read_params


@dataclass(frozen=True, slots=True)
class SLAParams:
    initial: int = param(8, 1)
    """The limit before any evidence."""
    increase_below: float = param(0.9, 0.0, 1.0, low_open=True)
    """u: grow only while the worst P90/target is under this."""
    max_decrease: float = param(0.5, 0.0, 0.9, low_open=True)
    """m: one cut lowers the limit by at most this fraction."""
    floor_span: float = param(2.0, 1.0)
    """A latency floor is proven by two limits at least this factor apart (or the floor limit)."""
    min_gain: float = param(0.03, 0.0)
    """g: a rate counts as higher only above (1 + g) x the other, beyond the noise."""
    noise_z: float = param(2.0, 0.0)
    """z: standard deviations of count noise a rate difference must exceed."""
    probe_gain: float = param(0.1, 0.0, 1.0, low_open=True)
    """p: a step near a known knee is max(1, p x L)."""
    rate_probe_gain: float = param(0.5, 0.0, 1.0, low_open=True)
    """q: a step when only throughput decides (SLA infeasible) is max(1, q x L)."""
    min_met: float = param(0.9, 0.0, 1.0)
    """Where less than this share of the output met every target (by more than `noise_z` standard
    deviations of the share), a lower limit is tried; a raise to a limit where less met is kept only
    on a measured gain in goodput."""
    judged_past_kv: float = param(1.0, 0.0)
    """From this multiple of the requests the KV cache holds (or holds with every request at its full
    size, where fewer), a raise within target is a throughput probe, kept only on a measured gain in
    rate (a large value turns the rule off)."""
    probe_every: float = param(10.0, 0.0)
    """Seconds between probes after a failed one, doubled after each further failure."""
    probe_dwell: float = param(4.0, 0.0, low_open=True)
    """Seconds of measurement behind a rate before it is compared."""
    settle: float = param(2.0, 0.0)
    """Seconds after a change before it is measured (at least the median e2e)."""
    half_life: float = param(10.0, 0.0, low_open=True)
    memory: float = param(30.0, 0.0, low_open=True)
    floor_memory: float = param(120.0, 0.0)
    floor_dwell: float = param(4.0, 0.0)
    """Seconds the lowest limit is measured, held, before it proves a latency floor."""
    knee_memory: float = param(60.0, 0.0)
    """Seconds a limit measured at or over u keeps growth below it to one proportional step."""
    evidence_alpha: float = param(0.01, 0.0, 1.0)
    hidden_share: float = param(0.5, 0.0, 1.0)
    """Growth stops while more than this share of the last increase is held outside the engine."""

    def __post_init__(self) -> None:
        if self.probe_dwell > self.memory:
            raise ValueError("algorithm 'sla': parameter 'probe_dwell' must be <= 'memory'")
        if self.half_life > self.memory:
            raise ValueError("algorithm 'sla': parameter 'half_life' must be <= 'memory'")

    @property
    def max_probe_wait(self) -> float:
        """The longest wait between probes: half the memory, so the last failure is still known."""
        return max(self.probe_every, self.memory / 2)

    @classmethod
    def from_mapping(cls, params: Mapping[str, object]) -> SLAParams:
        return read_params(cls, "sla", params)
