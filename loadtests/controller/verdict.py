"""Judge one cell (workload x SLA level) of the controller evaluation against the targets the
controller is held to (below).

Inputs are the per-run summaries of one workload (every repetition of every mode) and the level's
targets. Medians over repetitions decide, the spread (min-max) is reported beside them:
- throughput: the adaptive run's median >= 90% of direct's, and in no repetition below 80% of the
  direct run of the same repetition (the two ran minutes apart, so the pair shares the machine's
  drift). Not required where meeting the SLA costs throughput: when the best fixed limit that meets
  it delivers less goodput than 90% of direct's throughput, goodput against it is the target that
  can be met (the rule of the simulator's matrix, loadtests.controller.sim_matrix);
- the SLA can be met when some fixed limit's median P90s (or direct's) are all at or under the
  targets; then the adaptive goodput's median must be >= 95% of the best such fixed limit's (or
  direct's when no fixed limit meets it), and the adaptive median P90s within target + 10%;
- when no fixed limit (nor direct) meets it but the adaptive run's median P90s do, the SLA can be
  met too: a sweep of three limits can miss the band a controller finds. Goodput is then held
  against the most any fixed limit delivered within the targets, and throughput is not required
  when that is under 90% of direct's, as above;
- when nothing measured meets it, the gateway must report `sla_infeasible` in every repetition and
  keep throughput >= 90% of direct.
A check whose input is missing (no adaptive run, a gateway without `sla_infeasible`) fails with the
reason: a verdict is never passed on absent evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median

THROUGHPUT_MEDIAN = 0.90
THROUGHPUT_FLOOR = 0.80
GOODPUT_OF_BEST_FIXED = 0.95
P90_SLACK = 1.10
ADAPTIVE_MET = "best fixed goodput (only adaptive met the SLA)"


@dataclass(frozen=True, slots=True)
class RunSummary:
    workload: str
    repetition: int
    mode: str
    kind: str
    """direct, fixed or adaptive."""
    level: str | None
    throughput: float
    goodput: dict[str, float]
    """Output tok/s of requests meeting every target of each level (adaptive: its own level)."""
    p90: dict[str, float]
    client_cpu: float
    sla_infeasible: bool | None = None
    """As /admin/state reported it at the end of the run; None when the gateway has no such field."""
    limit_mean: float | None = None
    limit_min: float | None = None
    limit_max: float | None = None
    failures: int = 0
    requests: int = 0
    controller: str | None = None
    """The adaptive controller's label (adaptive runs only)."""


@dataclass(frozen=True, slots=True)
class Spread:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        return cls(median(values), min(values), max(values)) if values else None


@dataclass
class Cell:
    workload: str
    level: str
    targets: dict[str, float]
    controller: str | None = None
    direct: Spread | None = None
    adaptive: Spread | None = None
    adaptive_goodput: Spread | None = None
    adaptive_p90: dict[str, Spread] = field(default_factory=dict)
    reference: str | None = None
    """The best mode meeting the SLA (a fixed limit, else direct, else the adaptive controller's own
    runs); None when none does."""
    reference_goodput: float | None = None
    infeasible_reports: str = "n/a"
    client_cpu_max: float = 0.0
    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    @property
    def feasible(self) -> bool:
        return self.reference is not None

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for _, ok, _ in self.checks)


def meets(p90: Mapping[str, float], targets: Mapping[str, float]) -> bool:
    return all(signal in p90 and p90[signal] <= target for signal, target in targets.items())


def _median_p90(runs: Sequence[RunSummary], signal: str) -> float | None:
    values = [r.p90[signal] for r in runs if signal in r.p90]
    return median(values) if values else None


def _meets_median(runs: Sequence[RunSummary], targets: Mapping[str, float]) -> bool:
    for signal, target in targets.items():
        value = _median_p90(runs, signal)
        if value is None or value > target:
            return False
    return True


def _reference_modes(runs: Sequence[RunSummary]) -> dict[str, list[RunSummary]]:
    """The fixed and direct runs by mode."""
    by_mode: dict[str, list[RunSummary]] = {}
    for r in runs:
        if r.kind in ("fixed", "direct"):
            by_mode.setdefault(r.mode, []).append(r)
    return by_mode


def _median_goodput(group: Sequence[RunSummary], level: str) -> float:
    return median(r.goodput.get(level, 0.0) for r in group)


def reference(
    runs: Sequence[RunSummary], level: str, targets: Mapping[str, float]
) -> tuple[str | None, float | None]:
    """The fixed limit with the most median goodput among those meeting the SLA; direct if none."""
    by_mode = _reference_modes(runs)
    best: tuple[str | None, float | None] = (None, None)
    for kind in ("fixed", "direct"):
        for mode, group in by_mode.items():
            if group[0].kind != kind or not _meets_median(group, targets):
                continue
            value = _median_goodput(group, level)
            if best[1] is None or value > best[1]:
                best = (mode, value)
        if best[0] is not None:
            return best
    return best


def most_goodput(runs: Sequence[RunSummary], level: str) -> float:
    """The most median goodput at `level` that any fixed limit (or direct) delivered."""
    return max((_median_goodput(g, level) for g in _reference_modes(runs).values()), default=0.0)


def _throughput_checks(cell: Cell, direct: Sequence[RunSummary], adaptive: Sequence[RunSummary]) -> None:
    if cell.direct is None or cell.adaptive is None or cell.direct.median <= 0:
        cell.checks.append(("throughput", False, "missing direct or adaptive runs"))
        return
    if cell.reference_goodput is not None and cell.reference_goodput < THROUGHPUT_MEDIAN * cell.direct.median:
        share = cell.reference_goodput / cell.direct.median
        cell.checks.append(("throughput", True, f"not required: the SLA costs throughput ({share:.2f})"))
        return
    ratio = cell.adaptive.median / cell.direct.median
    cell.checks.append(
        ("throughput", ratio >= THROUGHPUT_MEDIAN, f"{ratio:.2f} of direct (>= {THROUGHPUT_MEDIAN})")
    )
    direct_by_rep = {r.repetition: r.throughput for r in direct}
    pairs = [a.throughput / direct_by_rep[a.repetition] for a in adaptive if direct_by_rep.get(a.repetition)]
    worst = min(pairs, default=0.0)
    cell.checks.append(
        ("worst repetition", worst >= THROUGHPUT_FLOOR, f"{worst:.2f} of direct (>= {THROUGHPUT_FLOOR})")
    )


def judge(
    runs: Sequence[RunSummary],
    workload: str,
    level: str,
    targets: Mapping[str, float],
    controller: str | None = None,
) -> Cell:
    """The cell's numbers and checks from all runs of `workload` (other levels' adaptive runs, and
    other controllers' when `controller` names one, ignored)."""
    mine = [r for r in runs if r.workload == workload]
    direct = [r for r in mine if r.kind == "direct"]
    adaptive = [
        r for r in mine if r.kind == "adaptive" and r.level == level and controller in (None, r.controller)
    ]
    cell = Cell(workload, level, dict(targets), controller)
    cell.direct = Spread.of([r.throughput for r in direct])
    cell.adaptive = Spread.of([r.throughput for r in adaptive])
    cell.adaptive_goodput = Spread.of([r.goodput.get(level, 0.0) for r in adaptive])
    for signal in targets:
        spread = Spread.of([r.p90[signal] for r in adaptive if signal in r.p90])
        if spread is not None:
            cell.adaptive_p90[signal] = spread
    cell.client_cpu_max = max((r.client_cpu for r in mine), default=0.0)
    reported = [r.sla_infeasible for r in adaptive if r.sla_infeasible is not None]
    if reported:
        cell.infeasible_reports = f"{sum(reported)}/{len(adaptive)}"
    cell.reference, cell.reference_goodput = reference(mine, level, targets)
    if cell.reference is None and adaptive and _meets_median(adaptive, targets):
        cell.reference, cell.reference_goodput = ADAPTIVE_MET, most_goodput(mine, level)
    _throughput_checks(cell, direct, adaptive)
    if cell.feasible:
        _feasible_checks(cell)
    else:
        every = bool(adaptive) and len(reported) == len(adaptive) and all(reported)
        cell.checks.append(("sla_infeasible", every, f"reported in {cell.infeasible_reports} runs"))
    return cell


def _feasible_checks(cell: Cell) -> None:
    assert cell.reference_goodput is not None
    got = cell.adaptive_goodput.median if cell.adaptive_goodput is not None else 0.0
    need = GOODPUT_OF_BEST_FIXED * cell.reference_goodput
    ratio = got / cell.reference_goodput if cell.reference_goodput > 0 else float("inf")
    detail = f"{ratio:.2f} of {cell.reference} (>= {GOODPUT_OF_BEST_FIXED})"
    cell.checks.append(("goodput", got >= need, detail))
    for signal, target in cell.targets.items():
        spread = cell.adaptive_p90.get(signal)
        ok = spread is not None and spread.median <= P90_SLACK * target
        shown = f"{spread.median:.3f}" if spread is not None else "none"
        cell.checks.append((f"{signal} P90", ok, f"{shown} s vs {target:.3f} s (+10%)"))
