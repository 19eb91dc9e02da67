"""Per-level results of a step sweep and the knee of its throughput curve.

A level's throughput is the output tokens delivered while it was held (by the time each request
finished) over its duration: what the server produced at that concurrency. Its latencies are
percentiles (nearest rank) of the requests that started while it was held, so a request that
started under a lower level does not count against a higher one.

Knee: the Kneedle rule (Satopaa, Albrecht, Irwin, Raghavan, "Finding a 'Kneedle' in a Haystack:
Detecting Knee Points in System Behavior", ICDCS Workshops 2011). With users x and throughput y
scaled to [0, 1] by their ranges, the knee is the level maximising ``y_n - x_n``: the point where
the curve stops rising faster than the straight line from the first level to the last. A curve
never above that line (linear or convex growth: the server is not yet saturated) has no knee.
Optionally, the largest level whose P90 TTFT meets an SLA is reported too.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loadtests.stats import percentile


@dataclass(slots=True)
class _Level:
    requests: int = 0
    shed: int = 0
    failures: int = 0
    tokens: int = 0
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LevelResult:
    users: int
    requests: int
    shed: int
    failures: int
    requests_per_s: float
    tokens_per_s: float
    ttft_p50: float | None
    ttft_p90: float | None
    e2e_p90: float | None


class StepRecorder:
    """Collects outcomes by level; times are seconds since the sweep started."""

    def __init__(self, levels: Sequence[int], step_time: float) -> None:
        self.levels = tuple(levels)
        self.step_time = step_time
        self._data = [_Level() for _ in self.levels]

    def _level(self, elapsed: float) -> _Level | None:
        i = int(elapsed // self.step_time)
        return self._data[i] if 0 <= i < len(self._data) else None

    def request(self, elapsed: float, e2e: float, failed: bool) -> None:
        level = self._level(elapsed)
        if level is None:
            return
        level.requests += 1
        level.failures += failed
        if not failed:
            level.e2e.append(e2e)

    def shed(self, elapsed: float) -> None:
        if (level := self._level(elapsed)) is not None:
            level.shed += 1

    def first_token(self, elapsed: float, ttft: float) -> None:
        if (level := self._level(elapsed)) is not None:
            level.ttft.append(ttft)

    def output(self, finished_at: float, tokens: int) -> None:
        if (level := self._level(finished_at)) is not None:
            level.tokens += tokens

    def results(self) -> list[LevelResult]:
        return [
            LevelResult(
                users=users,
                requests=d.requests,
                shed=d.shed,
                failures=d.failures,
                requests_per_s=d.requests / self.step_time,
                tokens_per_s=d.tokens / self.step_time,
                ttft_p50=percentile(d.ttft, 0.5),
                ttft_p90=percentile(d.ttft, 0.9),
                e2e_p90=percentile(d.e2e, 0.9),
            )
            for users, d in zip(self.levels, self._data, strict=True)
            if d.requests or d.shed or d.tokens
        ]

    def unfinished(self) -> list[int]:
        """Levels without a finished request: the run ended before or during them, or all hung."""
        return [
            u for u, d in zip(self.levels, self._data, strict=True) if not (d.requests or d.shed or d.tokens)
        ]


def find_knee(results: Sequence[LevelResult]) -> LevelResult | None:
    if len(results) < 3:
        return None
    xs = [float(r.users) for r in results]
    ys = [r.tokens_per_s for r in results]
    x_span, y_span = max(xs) - min(xs), max(ys) - min(ys)
    if x_span <= 0 or y_span <= 0:
        return None
    gaps = [(y - min(ys)) / y_span - (x - min(xs)) / x_span for x, y in zip(xs, ys, strict=True)]
    best = max(range(len(gaps)), key=gaps.__getitem__)
    return results[best] if gaps[best] > 0 else None


def within_sla(results: Sequence[LevelResult], ttft_p90: float) -> LevelResult | None:
    fitting = [r for r in results if r.ttft_p90 is not None and r.ttft_p90 <= ttft_p90]
    return max(fitting, key=lambda r: r.users) if fitting else None


_COLUMNS = (
    "users",
    "requests",
    "shed",
    "failures",
    "requests_per_s",
    "tokens_per_s",
    "ttft_p50",
    "ttft_p90",
    "e2e_p90",
)


def _cell(value: float | int | None) -> str:
    if value is None:
        return ""
    return str(value) if isinstance(value, int) else f"{value:.4f}"


def render(results: Sequence[LevelResult], sla_ttft_p90: float | None = None) -> str:
    lines = ["  ".join(f"{c:>14}" for c in _COLUMNS)]
    lines += ["  ".join(f"{_cell(getattr(r, c)):>14}" for c in _COLUMNS) for r in results]
    knee = find_knee(results)
    lines.append(
        f"knee (throughput stops scaling): {knee.users} users, {knee.tokens_per_s:.1f} tokens/s"
        if knee
        else "knee: none found (throughput still scales, or too few levels)"
    )
    if sla_ttft_p90 is not None:
        best = within_sla(results, sla_ttft_p90)
        lines.append(
            f"largest level with P90 TTFT <= {sla_ttft_p90:g} s: {best.users} users"
            if best
            else f"no level kept P90 TTFT <= {sla_ttft_p90:g} s"
        )
    return "\n".join(lines)


def write_csv(path: Path, results: Sequence[LevelResult]) -> None:
    knee = find_knee(results)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*_COLUMNS, "knee"])
        for r in results:
            writer.writerow([*(_cell(getattr(r, c)) for c in _COLUMNS), int(r is knee)])
