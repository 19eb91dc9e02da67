"""The `goodput` controller's parameters: each default, its bounds and its reason, written once.

Time is counted in turnovers (tau, the measured median end-to-end latency), not seconds, so the
same defaults hold on an engine whose steps take 10 ms and on one whose steps take 100 ms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.control.algorithms.base import param, read_params


@dataclass(frozen=True, slots=True)
class GoodputParams:
    initial: int = param(8, 1)
    """The limit before any evidence: small enough for any engine, grown from by slow start."""
    alpha: float = param(0.05, 0.0, 0.5, low_open=True)
    """Significance of every test (the miss share, a throughput gain, a latency floor): the chance
    that noise alone moves the limit, the same for a cut and for a raise."""
    max_decrease: float = param(0.5, 0.0, 0.9, low_open=True)
    """beta: one cut keeps at least this fraction of the limit (multiplicative decrease, as TCP)."""
    max_increase: float = param(2.0, 1.0, low_open=True)
    """m: a raise below saturation to L / r multiplies the limit by at most this (slow start, as
    TCP), and the latency line's extrapolation past L / r by at most this per turnover."""
    probe_step: float = param(0.25, 0.0, 1.0, low_open=True)
    """A raise past saturation, judged on its gain, adds this fraction of the limit."""
    settle: float = param(1.0, 0.0)
    """Turnovers after a change before its rate counts: the requests admitted before it are gone."""
    memory: float = param(20.0, 0.0)
    """Turnovers a failed limit or the engine's batch is remembered, then tried again; a limit
    that fails again is remembered twice as long each time (gc.model `Model.fail`)."""

    @classmethod
    def from_mapping(cls, params: Mapping[str, object]) -> GoodputParams:
        return read_params(cls, "goodput", params)
