"""Judging a target's runs in one cell against the client-side SLA rules (pure).

Above capacity (open loop at 1.5x and 3x, closed loop with more clients than `max_num_seqs`) a
gateway that holds the SLA at the client serves about the engine's capacity within the SLOs and
refuses the rest at once: goodput at least 0.8x the capacity measured in the same benchmark and 3x
direct's, the served requests' client TTFT P90 within 1.1x the target, every refusal with
`Retry-After`, nothing served after its budget ran out. Below capacity it must cost nothing:
goodput at least 0.97x direct's, client TTFT P90 at most direct's + 10%, at most 1% refused.

A ratio is taken per repetition against the direct run of the same repetition (same seed, same
minutes). The median over repetitions must meet each bound, and every single repetition must come
within 0.8x of it (a lower bound b: at least 0.8 b; an upper bound b: at most b / 0.8), so one
lucky repetition cannot carry a cell. Yes/no rules must hold in every repetition.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Literal

from loadtests.client_sla.records import Summary

SLACK = 0.8
"""How far below its bound a single repetition may fall (the median must meet the bound)."""


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    op: Literal[">=", "<="]
    bound: float
    values: tuple[float, ...]
    """One per repetition."""

    @property
    def median(self) -> float:
        return median(self.values)

    @property
    def worst(self) -> float:
        return min(self.values) if self.op == ">=" else max(self.values)

    @property
    def passed(self) -> bool:
        return _meets(self.median, self.op, self.bound) and _meets(self.worst, self.op, self._each_bound)

    @property
    def _each_bound(self) -> float:
        return self.bound * SLACK if self.op == ">=" else self.bound / SLACK


@dataclass(frozen=True, slots=True)
class Flag:
    """A rule every repetition must keep; `failures` counts the repetitions that broke it."""

    name: str
    failures: int
    repetitions: int

    @property
    def passed(self) -> bool:
        return self.failures == 0


@dataclass(frozen=True, slots=True)
class Verdict:
    checks: tuple[Check, ...]
    flags: tuple[Flag, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks) and all(f.passed for f in self.flags)


def _meets(value: float, op: str, bound: float) -> bool:
    return value >= bound if op == ">=" else value <= bound


def ratio(value: float, reference: float) -> float:
    if reference > 0:
        return value / reference
    return math.inf if value > 0 else 1.0


def judge(
    runs: Sequence[Summary],
    direct: Sequence[Summary],
    *,
    overloaded: bool,
    capacity: float,
    ttft_target_ms: float,
) -> Verdict:
    """`runs[i]` and `direct[i]` are the same repetition of one cell."""
    if len(runs) != len(direct) or not runs:
        raise ValueError("every repetition needs its run and its direct run")
    pairs = list(zip(runs, direct, strict=True))
    if overloaded:
        checks = (
            Check("goodput/capacity", ">=", 0.8, tuple(r.goodput / capacity for r, _ in pairs)),
            Check("goodput/direct", ">=", 3.0, tuple(ratio(r.goodput, d.goodput) for r, d in pairs)),
            Check("TTFT P90/target", "<=", 1.1, tuple(r.ttft_p90_ms / ttft_target_ms for r, _ in pairs)),
        )
    else:
        checks = (
            Check("goodput/direct", ">=", 0.97, tuple(ratio(r.goodput, d.goodput) for r, d in pairs)),
            Check("TTFT P90/direct", "<=", 1.1, tuple(ratio(r.ttft_p90_ms, d.ttft_p90_ms) for r, d in pairs)),
            Check("refused share", "<=", 0.01, tuple(r.refused_share for r, _ in pairs)),
        )
    flags = (
        Flag("refusals with Retry-After", sum(not r.honest_refusals for r in runs), len(runs)),
        Flag("none served late", sum(r.served_late > 0 for r in runs), len(runs)),
        Flag("no failures", sum(r.failed > 0 for r in runs), len(runs)),
    )
    return Verdict(checks, flags)


def judge_cells(
    summaries: Mapping[tuple[str, str], Sequence[Summary]],
    overloaded: Mapping[str, bool],
    capacity: float,
    ttft_target_ms: float,
    targets: Sequence[str] = ("fixed", "gateway"),
) -> dict[tuple[str, str], Verdict]:
    """A verdict per (cell name, target) from every target's summaries in repetition order."""
    out = {}
    for (cell, target), runs in summaries.items():
        direct = summaries.get((cell, "direct"))
        if target not in targets or not direct:
            continue
        out[(cell, target)] = judge(
            runs, direct, overloaded=overloaded[cell], capacity=capacity, ttft_target_ms=ttft_target_ms
        )
    return out
