"""Numbers of one run: goodput, SLA attainment, shedding, P90s, convergence, recovery, fairness.

Definitions (all as the client saw it):
- a request *meets the SLA* when it was served (stream complete) with TTFT <= SLA_TTFT and TPOT <=
  SLA_TPOT, TTFT counted from the user's first attempt (a shed answer and its retry count against it);
- goodput = requests that met the SLA / scenario duration;
- attainment = share of served requests that met the SLA;
- shed share = share of requests whose final answer was a 429/503 refusal from the gateway;
- errors = anything else that was not served: transport errors, cut streams, timeouts, unfinished;
- P90s are nearest-rank over served requests; "admitted P90" uses the TTFT of the answered attempt;
- per-phase numbers count a request in the phase it arrived in, except the admitted requests' P90s
  (converged P90, recovery), which count it when its answered attempt was sent: a request shed at
  14 s and served after a retry at 18 s ran on the backend as it was at 18 s;
- time to converge (gateway runs), per phase: from the phase start until the summed limit of the
  healthy backends stays within max(2, 20%) of its median over the second half of the phase;
  "converged P90" pools the served requests admitted after that point in every phase;
- recovery (after a capacity drop at time t): the first 2-second bin (by admission) from which on, until
  the phase ends, every bin has the admitted requests' P90 TTFT (of the answered attempt: the wait
  a client chose before retrying is not the server's) and P90 TPOT within the SLA.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from loadtests.scenarios.definitions import SLA_TPOT, SLA_TTFT
from loadtests.scenarios.loadgen import Record
from loadtests.scenarios.runner import RunData
from loadtests.scenarios.sampler import Tick
from loadtests.stats import p90

BIN = 2.0
MIN_BIN = 3


def meets(r: Record) -> bool:
    return (
        r.outcome == "ok"
        and r.ttft is not None
        and r.ttft <= SLA_TTFT
        and (r.tpot is None or r.tpot <= SLA_TPOT)
    )


def admitted_at(r: Record) -> float:
    """When the gateway admitted the request's answered attempt (its arrival if not recorded)."""
    return r.arrival if r.attempt_at is None else r.attempt_at


def _phase_bounds(data: RunData) -> list[tuple[float, float, str]]:
    phases = data.scenario.phases
    ends = [at for at, _ in phases[1:]] + [data.scenario.duration]
    return [(start, end, label) for (start, label), end in zip(phases, ends, strict=True)]


def total_limit(tick: Tick) -> int | None:
    limits = [b.limit for b in tick.backends if b.limit is not None and b.healthy is not False]
    return sum(limits) if limits else None


def converge_time(ticks: Sequence[Tick], start: float, end: float) -> float | None:
    series = [(t.at, total_limit(t)) for t in ticks if start <= t.at < end]
    points = [(at, v) for at, v in series if v is not None]
    if len(points) < 4:
        return None
    tail = [v for at, v in points if at >= (start + end) / 2] or [v for _, v in points]
    final = statistics.median(tail)
    band = max(2.0, 0.2 * final)
    converged_at = start
    for at, v in points:
        if abs(v - final) > band:
            converged_at = at + 0.5
    return min(converged_at, end) - start


def recovery_time(records: Sequence[Record], start: float, end: float) -> float | None:
    """Seconds after `start` until every later bin before `end` has P90s within the SLA."""
    bins: list[tuple[float, bool]] = []
    t = start
    while t < end - 1e-9:
        served = [r for r in records if r.outcome == "ok" and t <= admitted_at(r) < t + BIN]
        if len(served) >= MIN_BIN:
            ttft, tpot = p90(r.attempt_ttft for r in served), p90(r.tpot for r in served)
            ok = (ttft or 0.0) <= SLA_TTFT and (tpot or 0.0) <= SLA_TPOT
            bins.append((t, ok))
        t += BIN
    if not bins:
        return None
    recovered: float | None = start
    for at, ok in bins:
        if not ok:
            recovered = None
        elif recovered is None:
            recovered = at
    return None if recovered is None else recovered - start


def summarize(data: RunData) -> dict[str, Any]:
    recs = data.records
    duration = data.scenario.duration
    served = [r for r in recs if r.outcome == "ok"]
    shed = [r for r in recs if r.outcome == "shed"]
    errors = [r for r in recs if r.outcome not in ("ok", "shed")]
    met = [r for r in served if meets(r)]
    out: dict[str, Any] = {
        "scenario": data.scenario.name,
        "mode": data.mode,
        "requests": len(recs),
        "served": len(served),
        "shed": len(shed),
        "errors": len(errors),
        "goodput_rps": len(met) / duration,
        "served_rps": len(served) / duration,
        "tokens_per_s": sum(r.output_tokens for r in served) / duration,
        "attainment": len(met) / len(served) if served else None,
        "shed_share": len(shed) / len(recs) if recs else 0.0,
        "error_share": len(errors) / len(recs) if recs else 0.0,
        "p90_ttft": p90(r.ttft for r in served),
        "p90_admitted_ttft": p90(r.attempt_ttft for r in served),
        "p90_tpot": p90(r.tpot for r in served),
        "p90_e2e": p90(r.e2e for r in served),
        "shed_reasons": _count(r.shed_reason for r in shed),
        "error_kinds": _count(r.error or r.outcome for r in errors),
        "shed_with_retry_after": sum(1 for r in shed if r.retry_after is not None),
        "retried": sum(1 for r in recs if r.attempts > 1),
        "peak_rss_mb": data.peak_rss_mb,
        "client_lag_p90_s": p90(t.lag_s for t in data.ticks),
        "client_lag_max_s": max((t.lag_s for t in data.ticks), default=None),
        "idle_after_s": data.idle_after_s,
        "wall_s": data.wall_s,
        "events": data.event_times,
    }
    phases, converged = _phases(data, served)
    out["phases"] = phases
    known = [p["converge_s"] for p in phases]
    out["converge_s"] = None if any(c is None for c in known) else max(known)
    out["converged_p90_admitted_ttft"] = p90(r.attempt_ttft for r in converged)
    out["converged_p90_ttft"] = p90(r.ttft for r in converged)
    out["converged_p90_tpot"] = p90(r.tpot for r in converged)
    if len({r.tenant for r in recs}) > 1:
        out["tenants"] = _tenants(recs, served, met, duration)
    return out


def _phases(data: RunData, served: Sequence[Record]) -> tuple[list[dict[str, Any]], list[Record]]:
    """Each phase's numbers, and the served requests admitted after their phase converged."""
    adaptive = data.mode != "direct" and not data.mode.startswith("fixed-")
    phases = []
    converged: list[Record] = []
    for start, end, label in _phase_bounds(data):
        conv = converge_time(data.ticks, start, end) if adaptive else 0.0
        in_phase = [r for r in served if start <= r.arrival < end]
        after = [r for r in served if conv is not None and start + conv <= admitted_at(r) < end]
        converged += after
        limits = [v for t in data.ticks if start <= t.at < end if (v := total_limit(t)) is not None]
        phases.append(
            {
                "label": label,
                "start": start,
                "converge_s": conv,
                "summed_limit": statistics.fmean(limits) if limits else None,
                "goodput_rps": sum(1 for r in in_phase if meets(r)) / (end - start),
                "p90_ttft": p90(r.ttft for r in in_phase),
                "p90_tpot": p90(r.tpot for r in in_phase),
                "recovery_s": recovery_time(data.records, start, end),
            }
        )
    return phases, converged


def _tenants(
    recs: Sequence[Record], served: Sequence[Record], met: Sequence[Record], duration: float
) -> dict[str, dict[str, Any]]:
    """Per tenant: requests, served, met the SLA, and its share of what was served during the load."""
    # Shares count what was admitted while the load ran: in the drain after it, only retries
    # are left, and the tenant with the most of them may take what no one else asks for.
    during = [r for r in served if admitted_at(r) < duration]
    return {
        name: {
            "requests": sum(1 for r in recs if r.tenant == name),
            "served": sum(1 for r in served if r.tenant == name),
            "met": sum(1 for r in met if r.tenant == name),
            "served_share": (sum(1 for r in during if r.tenant == name) / len(during) if during else 0.0),
        }
        for name in sorted({r.tenant for r in recs})
    }


def _count(items: Iterable[str | None]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        key = item or "-"
        counts[key] = counts.get(key, 0) + 1
    return counts
