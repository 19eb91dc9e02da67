"""The contract every limit algorithm keeps: given an observation, return a decision.

Algorithms are pure: no I/O, no clock reads, no asyncio. They may keep small state between calls
(a smoothed estimate, the last direction) but everything they know about time comes from
`Observation.now`.

This module also holds what the algorithms share: clamping, turning a wanted limit into a
`Decision`, the worst P90/target ratio, and a strict reader for the parameters given in config.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from gateway.types import SLA, Decision, Direction, Observation, Signal


class LimitAlgorithm(Protocol):
    name: str
    respects_kv_ceiling: bool
    """False only for `fixed`: a fixed limit is obeyed as configured (up to the configured max)."""

    def initial_limit(self, floor: int, ceiling: int) -> int:
        """The limit to start with before any sample has been seen."""
        ...

    def update(self, obs: Observation) -> Decision:
        """The new limit, clamped to [obs.floor, obs.ceiling], and why."""
        ...


def clamp(value: float, floor: int, ceiling: int) -> int:
    return max(floor, min(ceiling, int(value)))


def decide(
    obs: Observation,
    wanted: float,
    reason: str,
    detail: str,
    latency_floor: dict[Signal, float] | None = None,
) -> Decision:
    """Clamp `wanted` to [floor, ceiling] and label the move relative to the current limit.

    When the ceiling (usually the KV-derived one) forces the limit down although the algorithm
    wanted to hold or grow, the reason says so instead of the algorithm's own word.
    """
    new = clamp(wanted, obs.floor, max(obs.floor, obs.ceiling))
    if new < obs.limit and wanted >= obs.limit:
        reason = "above_ceiling"
        detail = f"limit {obs.limit} is above the ceiling {obs.ceiling}; {detail}"
    return Decision(new, direction(obs.limit, new), reason, detail, latency_floor)


def direction(old: int, new: int) -> Direction:
    """The move from limit `old` to limit `new`."""
    if new > old:
        return Direction.UP
    if new < old:
        return Direction.DOWN
    return Direction.HOLD


def worst_ratio(
    obs: Observation, sla: SLA, admit: Callable[[Signal, float], bool] | None = None
) -> tuple[Signal | None, float]:
    """The SLA signal whose window P90 is furthest over (or least under) its target.

    Signals without a target, without a measured P90, or that `admit(signal, target)` refuses are
    ignored; with none left the ratio is 0.
    """
    worst: Signal | None = None
    ratio = 0.0
    for signal, target in sla.targets().items():
        p90 = obs.p90.get(signal)
        if p90 is None or target <= 0 or (admit is not None and not admit(signal, target)):
            continue
        r = p90 / target
        if worst is None or r > ratio:
            worst, ratio = signal, r
    return worst, ratio


def quantile_exceeds(values: Sequence[float], target: float, q: float, alpha: float) -> bool:
    """Whether `values` show, at significance `alpha`, that their q-quantile is above `target`.

    If the q-quantile were at the target, each value would exceed it with probability 1 - q, so
    the number of values over the target would be Binomial(n, 1 - q). Too many for that (the
    chance of at least as many is at most `alpha`) means the quantile is above. With q = 0.9 and
    alpha = 0.01: 3 of 3, 3 of 5, 4 of 8, 5 of 12, 7 of 20, 9 of 32, 19 of 100. One stalled request
    among a few is not enough; most of a few values over the target is.
    """
    n = len(values)
    over = sum(1 for v in values if v > target)
    return over > 0 and binomial_tail(n, over, round(1.0 - q, 12)) <= alpha


def binomial_tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), 0 < k <= n, 0 < p < 1.

    The first term from log-gamma, each next one by the ratio of consecutive terms,
    (n - i) / (i + 1) x p / (1 - p): exact in floats for any n, where binomial coefficients as
    integers overflow a float past n = 1,030.
    """
    log_term = (
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )
    term, tail, odds = math.exp(log_term), 0.0, p / (1.0 - p)
    for i in range(k, n + 1):
        tail += term
        if term <= tail * 1e-15:
            break  # past the mode the terms fall geometrically
        term *= (n - i) / (i + 1) * odds
    return min(1.0, tail)


def is_binding(obs: Observation) -> bool:
    """Whether the limit actually held traffic back since the previous tick."""
    return binds(obs.peak_inflight, obs.limit, obs.queued)


def binds(peak_inflight: int, limit: int, queued: int) -> bool:
    """Whether a limit held traffic back: it was full, or requests waited for it."""
    return peak_inflight >= limit or queued > 0


class Params:
    """Reads an algorithm's parameters from config, failing with the offending key named.

    Call `finish()` after reading every known key: anything left over is a typo in the config.
    """

    def __init__(self, algorithm: str, params: Mapping[str, object]) -> None:
        self._algorithm = algorithm
        self._params = dict(params)
        self._known: list[str] = []

    def _error(self, key: str, message: str) -> ValueError:
        return ValueError(f"algorithm {self._algorithm!r}: parameter {key!r} {message}")

    def number(
        self,
        key: str,
        default: float | None,
        *,
        low: float | None = None,
        high: float | None = None,
        low_open: bool = False,
    ) -> float:
        self._known.append(key)
        raw = self._params.pop(key, default)
        if raw is None:
            raise self._error(key, "is required")
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise self._error(key, f"must be a number, got {raw!r}")
        value = float(raw)
        if not math.isfinite(value):
            raise self._error(key, f"must be finite, got {raw!r}")
        if low is not None and (value < low or (low_open and value == low)):
            bound = f"> {low:g}" if low_open else f">= {low:g}"
            raise self._error(key, f"must be {bound}, got {raw!r}")
        if high is not None and value > high:
            raise self._error(key, f"must be <= {high:g}, got {raw!r}")
        return value

    def integer(
        self, key: str, default: int | None, *, low: int | None = None, high: int | None = None
    ) -> int:
        self._known.append(key)
        raw = self._params.pop(key, default)
        if raw is None:
            raise self._error(key, "is required")
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise self._error(key, f"must be an integer, got {raw!r}")
        if low is not None and raw < low:
            raise self._error(key, f"must be >= {low}, got {raw!r}")
        if high is not None and raw > high:
            raise self._error(key, f"must be <= {high}, got {raw!r}")
        return raw

    def choice(self, key: str, default: str, options: tuple[str, ...]) -> str:
        self._known.append(key)
        raw = self._params.pop(key, default)
        if raw not in options:
            raise self._error(key, f"must be one of {', '.join(options)}; got {raw!r}")
        return str(raw)

    def finish(self) -> None:
        if self._params:
            unknown = ", ".join(repr(k) for k in sorted(self._params))
            known = ", ".join(self._known) or "none"
            raise ValueError(f"algorithm {self._algorithm!r}: unknown parameter {unknown} (known: {known})")


P = TypeVar("P")


def param(default: float, low: float, high: float | None = None, *, low_open: bool = False) -> Any:
    """A field of an algorithm's parameter dataclass: its default and its bounds, written once."""
    return dataclasses.field(default=default, metadata={"low": low, "high": high, "low_open": low_open})


def read_params(cls: type[P], algorithm: str, params: Mapping[str, object]) -> P:
    """An instance of the parameter dataclass `cls` from config: each field by its default and
    bounds (an `int` field read as an integer), unknown keys refused."""
    p = Params(algorithm, params)
    values: dict[str, float | int] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        low, high, default = f.metadata["low"], f.metadata["high"], f.default
        assert isinstance(default, int | float)
        if f.type == "int":
            values[f.name] = p.integer(f.name, int(default), low=int(low))
        else:
            values[f.name] = p.number(f.name, default, low=low, high=high, low_open=f.metadata["low_open"])
    p.finish()
    return cls(**values)
