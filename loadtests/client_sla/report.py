"""The client-side SLA tables: every repetition and the median per cell and target, and the verdicts.

Numbers per repetition are joined with `/` in repetition order, the median after them; a verdict
cell shows the median against its bound and, in brackets, the worst repetition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median

from loadtests.client_sla.plan import CANDIDATE, TARGETS
from loadtests.client_sla.records import Summary
from loadtests.client_sla.run import Outcome
from loadtests.client_sla.verdict import Check, Verdict, judge_cells


def grouped(outcomes: Sequence[Outcome]) -> dict[tuple[str, str], list[Summary]]:
    """Summaries per (cell name, target), in repetition order."""
    out: dict[tuple[str, str], list[Summary]] = {}
    for o in sorted(outcomes, key=lambda o: o.run.repetition):
        out.setdefault((o.run.cell.name, o.run.target), []).append(o.summary)
    return out


def _series(values: Sequence[float], fmt: str) -> str:
    each = " / ".join(format(v, fmt) for v in values)
    return (
        f"{each} (**{format(median(values), fmt)}**)" if len(values) > 1 else f"**{format(values[0], fmt)}**"
    )


def runs_table(outcomes: Sequence[Outcome]) -> str:
    groups = grouped(outcomes)
    cells = list(dict.fromkeys(o.run.cell.name for o in outcomes))
    lines = [
        "| cell | target | goodput req/s | completed | refused | failed | client TTFT P90 s | TPOT P90 ms "
        "| refusals without Retry-After | served late |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        for target in (*TARGETS, CANDIDATE):
            runs = groups.get((cell, target))
            if not runs:
                continue
            lines.append(
                f"| {cell} | {target} | {_series([r.goodput for r in runs], '.2f')} "
                f"| {_counts([r.completed for r in runs], [r.requests for r in runs])} "
                f"| {'/'.join(str(r.refused) for r in runs)} | {'/'.join(str(r.failed) for r in runs)} "
                f"| {_series([r.ttft_p90_ms / 1000 for r in runs], '.2f')} "
                f"| {_series([r.tpot_p90_ms for r in runs], '.0f')} "
                f"| {'/'.join(str(r.refused_without_retry_after) for r in runs)} "
                f"| {'/'.join(str(r.served_late) for r in runs)} |"
            )
    return "\n".join(lines)


def _counts(done: Sequence[int], sent: Sequence[int]) -> str:
    return " / ".join(f"{d}/{s}" for d, s in zip(done, sent, strict=True))


def _check(c: Check) -> str:
    mark = "" if c.passed else " ✗"
    return f"{_num(c.median)} {c.op} {c.bound:g} ({_num(c.worst)}){mark}"


def _num(v: float) -> str:
    return "inf" if v == float("inf") else f"{v:.2f}" if abs(v) >= 0.1 or v == 0 else f"{v:.3f}"


def verdict_table(verdicts: Mapping[tuple[str, str], Verdict]) -> str:
    lines = [
        "| cell | target | goodput rule | second rule | third rule | every repetition | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for (cell, target), v in verdicts.items():
        checks = [f"{c.name}: {_check(c)}" for c in v.checks]
        broken = [f"{f.name}: {f.failures}/{f.repetitions} broke it" for f in v.flags if not f.passed]
        lines.append(
            f"| {cell} | {target} | {' | '.join(checks)} | {'; '.join(broken) or 'kept'} "
            f"| **{'PASS' if v.passed else 'FAIL'}** |"
        )
    return "\n".join(lines)


def verdicts_for(
    outcomes: Sequence[Outcome], capacity: float, ttft_target_ms: float
) -> dict[tuple[str, str], Verdict]:
    overloaded = {o.run.cell.name: o.run.cell.overloaded for o in outcomes}
    return judge_cells(
        grouped(outcomes), overloaded, capacity, ttft_target_ms, ("fixed", "gateway", CANDIDATE)
    )
