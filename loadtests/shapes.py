"""Load shapes, chosen with ``--shape steady|step|spike|ramp``.

Each schedule is a pure function of the seconds since the test started that returns the target user
count and spawn rate, or None when the test is over. The locustfile's one shape class builds the
schedule named on the command line (or in the web UI) when a run starts. This module does not import
Locust, whose import patches the standard library for gevent.

- steady: ``-u`` users for ``-t`` (forever without ``-t``).
- step:   a concurrency sweep, ``--step-levels`` (default 1, 2, 4, ... up to ``-u``) each held
          ``--step-time`` seconds; the per-level table and its knee are written at the end (see
          knee.py). This is the sweep a capacity study runs by hand: throughput rises with
          concurrency until the server saturates, then only latency rises.
- spike:  ``-u`` users, jumping to ``--spike-users`` at ``--spike-at`` for ``--spike-duration``.
- ramp:   a linear rise from 1 to ``-u`` users over ``--ramp-time``, then held until ``-t``.
"""

from __future__ import annotations

import math
from argparse import Namespace
from dataclasses import dataclass
from typing import Any, Protocol

SHAPES = ("steady", "step", "spike", "ramp")

Target = tuple[int, float] | None


class Schedule(Protocol):
    def at(self, elapsed: float) -> Target: ...


@dataclass(frozen=True, slots=True)
class Steady:
    users: int
    spawn_rate: float
    duration: float | None

    def at(self, elapsed: float) -> Target:
        if self.duration is not None and elapsed >= self.duration:
            return None
        return self.users, self.spawn_rate


@dataclass(frozen=True, slots=True)
class Step:
    levels: tuple[int, ...]
    step_time: float
    spawn_rate: float

    def index(self, elapsed: float) -> int | None:
        i = int(elapsed // self.step_time)
        return i if 0 <= i < len(self.levels) else None

    def at(self, elapsed: float) -> Target:
        i = self.index(elapsed)
        if i is None:
            return None
        # Reach each level within about a second so the level is held for the whole step.
        jump = self.levels[i] - (self.levels[i - 1] if i else 0)
        return self.levels[i], max(self.spawn_rate, float(jump))


@dataclass(frozen=True, slots=True)
class Spike:
    users: int
    spike_users: int
    spike_at: float
    spike_duration: float
    duration: float

    def at(self, elapsed: float) -> Target:
        if elapsed >= self.duration:
            return None
        rate = float(max(self.users, self.spike_users))  # a spike arrives, and leaves, at once
        if self.spike_at <= elapsed < self.spike_at + self.spike_duration:
            return self.spike_users, rate
        return self.users, rate


@dataclass(frozen=True, slots=True)
class Ramp:
    users: int
    ramp_time: float
    duration: float

    def at(self, elapsed: float) -> Target:
        if elapsed >= self.duration:
            return None
        if elapsed >= self.ramp_time or self.ramp_time <= 0:
            return self.users, float(self.users)
        target = 1 + math.floor((self.users - 1) * elapsed / self.ramp_time)
        return target, max(1.0, self.users / self.ramp_time)


def doubling_levels(top: int) -> tuple[int, ...]:
    levels = [1]
    while levels[-1] * 2 < top:
        levels.append(levels[-1] * 2)
    if levels[-1] != top:
        levels.append(top)
    return tuple(levels)


def _number(options: Namespace, name: str, default: float | None) -> float | None:
    raw: Any = getattr(options, name, None)
    if raw is None or str(raw).strip() in ("", "None"):  # the web UI sends text
        return default
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"--{name.replace('_', '-')} must be a number, got {raw!r}") from None


def build_schedule(options: Namespace) -> Schedule:
    """The schedule the options ask for; ValueError names the option that is wrong."""
    shape = str(getattr(options, "shape", None) or "steady").lower()
    users = int(_number(options, "num_users", 1) or 1)
    rate = _number(options, "spawn_rate", 1.0) or 1.0
    duration = _number(options, "run_time", None)
    if users < 1 or rate <= 0:
        raise ValueError("--users must be >= 1 and --spawn-rate > 0")
    if shape == "steady":
        return Steady(users, rate, duration)
    if shape == "step":
        raw_levels = str(getattr(options, "step_levels", "") or "").strip()
        try:
            levels = (
                tuple(int(x) for x in raw_levels.split(",") if x.strip())
                if raw_levels
                else doubling_levels(users)
            )
        except ValueError:
            raise ValueError(f"--step-levels must be integers like 1,2,4; got {raw_levels!r}") from None
        step_time = _number(options, "step_time", 30.0) or 0.0
        if not levels or min(levels) < 1 or step_time <= 0:
            raise ValueError("--step-levels must be positive and --step-time > 0")
        return Step(levels, step_time, rate)
    if duration is None:
        raise ValueError(f"--shape {shape} needs a run time (-t/--run-time)")
    if shape == "spike":
        spike_users = int(_number(options, "spike_users", 4.0 * users) or 0)
        spike_at = _number(options, "spike_at", duration / 3) or 0.0
        spike_duration = _number(options, "spike_duration", duration / 6) or 0.0
        if spike_users < 1 or spike_at < 0 or spike_duration <= 0:
            raise ValueError("--spike-users must be >= 1, --spike-at >= 0, --spike-duration > 0")
        return Spike(users, spike_users, spike_at, spike_duration, duration)
    if shape == "ramp":
        ramp_time = _number(options, "ramp_time", duration) or 0.0
        if ramp_time < 0:
            raise ValueError("--ramp-time must be >= 0")
        return Ramp(users, ramp_time, duration)
    raise ValueError(f"--shape must be one of {', '.join(SHAPES)}; got {shape!r}")
