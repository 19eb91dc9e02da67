"""Faults the simulated server can be told to show, at start (flags) or at run time (admin route).

- speed: factor on the engine's pace; 0.5 makes every step take twice its modelled time.
- error_rate, error_status: that fraction of inference requests is answered with that status.
- frontend_delay: extra seconds the API server holds every request before the engine sees it
  (a CPU-starved host): a latency floor outside the engine that no concurrency limit controls.
- hang: requests are accepted and never answered, and the engine stops stepping; after a reset
  the hung connections are dropped.
- die: every route but the admin one drops its connection without an answer, streams in flight
  are cut, and the engine's sequences are aborted.
- max_num_queued_reqs: as vLLM's flag of that name (0.32), the most unfinished requests (running
  plus waiting) the engine takes; one more is answered 503 "The engine is currently busy ..."
  before any byte of it is generated. 0: no cap (vLLM's default).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Faults:
    speed: float = 1.0
    error_rate: float = 0.0
    error_status: int = 500
    frontend_delay: float = 0.0
    hang: bool = False
    die: bool = False
    max_num_queued_reqs: int = 0

    def __post_init__(self) -> None:
        if not self.speed > 0:
            raise ValueError("speed must be > 0")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError("error_rate must be within 0..1")
        if not 400 <= self.error_status <= 599:
            raise ValueError("error_status must be a 4xx or 5xx status")
        if not self.frontend_delay >= 0:
            raise ValueError("frontend_delay must be >= 0")
        if self.max_num_queued_reqs < 0:
            raise ValueError("max_num_queued_reqs must be >= 0 (0: no cap)")

    @property
    def normal(self) -> bool:
        return self == Faults()

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    def updated(self, body: Mapping[str, object]) -> Faults:
        """Apply an admin update: {"reset": true} first restores normal, then fields apply."""
        base = Faults() if body.get("reset") is True else self
        changes: dict[str, object] = {}
        for key, value in body.items():
            if key == "reset":
                if not isinstance(value, bool):
                    raise ValueError("reset must be a bool")
                continue
            if key in ("hang", "die"):
                if not isinstance(value, bool):
                    raise ValueError(f"{key} must be a bool")
            elif key in ("error_status", "max_num_queued_reqs"):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"{key} must be an int")
            elif key in ("speed", "error_rate", "frontend_delay"):
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ValueError(f"{key} must be a number")
                value = float(value)
            else:
                raise ValueError(f"unknown fault {key!r}")
            changes[key] = value
        return dataclasses.replace(base, **changes)  # type: ignore[arg-type]
