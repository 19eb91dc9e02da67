"""Hand-built observations for the algorithm tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.types import EngineStats, Observation

ObsFactory = Callable[..., Observation]


def make_obs(**overrides: Any) -> Observation:
    """An observation of a healthy backend binding its limit (10 by default), with plenty of samples."""
    fields: dict[str, Any] = {
        "now": 100.0,
        "limit": 10,
        "ceiling": 64,
        "floor": 1,
        "queued": 0,
        "p90": {},
        "p50": {},
        "sample_count": 50,
        "min_samples": 8,
    }
    fields.update(overrides)
    # Every measured P90 stands on the sample count unless told otherwise.
    fields.setdefault("counts", {signal: fields["sample_count"] for signal in fields["p90"]})
    # Binding unless told otherwise: the peak follows the limit.
    fields.setdefault("peak_inflight", fields["limit"])
    return Observation(**fields)


def engine_stats(**kw: Any) -> EngineStats:
    kw.setdefault("at", 99.0)
    return EngineStats(**kw)
