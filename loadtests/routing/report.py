"""From a run's raw readings to its numbers, and from the runs to the tables and the targets.

Per run, over the answers that ended inside the measured window:
- throughput: answered requests per second (and output tokens, every answer being `max_tokens`);
- TTFT P50 / P90 as the client saw it (queueing in the gateway included), nearest rank;
- hit rate: the backends' `vllm:prefix_cache_hits_total` growth over `vllm:prefix_cache_queries_total`
  growth, summed over the backends (tokens, vLLM's semantics);
- utilization: requests in flight over the pool's limit, averaged over the samples of `/admin/state`
  (every 0.25 s);
- load spread, two ways. Over the window: the busiest backend's mean in-flight count over the mean
  per backend (a hot spot). At each sample where some backend has room and the mean load is at
  least MIN_MEAN requests per backend (below it one request is more than a quarter of the mean):
  the busiest backend's share of its limit over the pool's, its P99 and largest value. The router
  bounds where it places a request; requests ending elsewhere between placements move the sampled
  ratio too, whatever the strategy, which is why least_loaded is shown beside it;
- CPU: the client's CPU time over the window (cores; one client drives every strategy's users), its
  share of all the CPU the client, gateways and simulators used; the machine's busy cores (other
  work on the machine included).

Targets compare prefix with least_loaded in the same repetition (paired: they ran side by side);
a target is judged on the median of those ratios over the repetitions, and each one is shown.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

from gateway.control.window import nearest_rank
from loadtests.routing.run import Raw

MIN_MEAN = 4.0
SPREAD_BOUND = 1.25


@dataclass(frozen=True, slots=True)
class Result:
    workload: str
    strategy: str
    repeat: int
    seconds: float
    answered: int
    errors: int
    """Failed requests over the whole run (none are expected: the queue's timeout is long)."""
    rps: float
    tokens_per_s: float
    ttft_p50: float | None
    ttft_p90: float | None
    hit_rate: float | None
    utilization: float | None
    hot_spot: float | None
    spread_p99: float | None
    spread_max: float | None
    spread_samples: int
    client_cores: float
    client_share: float
    gateway_cores: float
    machine_busy: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def served_cpu(raw: Raw) -> float:
    """CPU seconds the run's gateway and simulators used over the window."""
    return sum(raw.end.cpu[k] - raw.start.cpu[k] for k in ("gateway", "sims"))


def summarize(
    raw: Raw, workload: str, strategy: str, repeat: int, max_tokens: int, all_served_cpu: float
) -> Result:
    """`all_served_cpu`: what every gateway and simulator running beside this one used (the client
    drives them all, so its share is of their sum)."""
    start, end = raw.start, raw.end
    seconds = end.at - start.at
    ok = [a for a in raw.answers if start.at <= a.ended <= end.at and a.status == 200]
    ttfts = sorted(a.first - a.sent for a in ok if a.first is not None)
    queries = end.prefix[0] - start.prefix[0]
    hits = end.prefix[1] - start.prefix[1]
    used = {k: end.cpu[k] - start.cpu[k] for k in end.cpu}
    total_cpu = used["client"] + all_served_cpu
    ratios = sorted(spreads(raw))
    return Result(
        workload=workload,
        strategy=strategy,
        repeat=repeat,
        seconds=round(seconds, 2),
        answered=len(ok),
        errors=len(raw.errors),
        rps=len(ok) / seconds,
        tokens_per_s=len(ok) * max_tokens / seconds,
        ttft_p50=nearest_rank(ttfts, 0.5),
        ttft_p90=nearest_rank(ttfts, 0.9),
        hit_rate=hits / queries if queries > 0 else None,
        utilization=_mean([sum(i) / sum(lim) for i, lim in raw.spread]),
        hot_spot=hot_spot(raw),
        spread_p99=nearest_rank(ratios, 0.99),
        spread_max=ratios[-1] if ratios else None,
        spread_samples=len(ratios),
        client_cores=used["client"] / seconds,
        client_share=used["client"] / total_cpu if total_cpu > 0 else 0.0,
        gateway_cores=used["gateway"] / seconds,
        machine_busy=(used["machine"] - used["machine_idle"]) / seconds,
    )


def spreads(raw: Raw) -> list[float]:
    """The busiest backend's load over the mean, at each sample where that bound applies."""
    out: list[float] = []
    for inflight, limits in raw.spread:
        total, capacity = sum(inflight), sum(limits)
        if total < MIN_MEAN * len(inflight) or all(i >= lim for i, lim in zip(inflight, limits, strict=True)):
            continue
        busiest = max(i / lim for i, lim in zip(inflight, limits, strict=True))
        out.append(busiest / (total / capacity))
    return out


def hot_spot(raw: Raw) -> float | None:
    """The busiest backend's mean in-flight count over the window, over the mean per backend."""
    if not raw.spread:
        return None
    n = len(raw.spread[0][0])
    means = [statistics.fmean(inflight[b] for inflight, _ in raw.spread) for b in range(n)]
    overall = statistics.fmean(means)
    return max(means) / overall if overall > 0 else None


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _cell(values: list[float | None], fmt: str) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    mid = format(statistics.median(present), fmt)
    if len(present) == 1:
        return mid
    return f"{mid} ({format(min(present), fmt)}-{format(max(present), fmt)})"


def table(results: list[Result], workload: str, strategies: list[str]) -> str:
    rows = [
        "| strategy | req/s | tok/s | TTFT P50 | TTFT P90 | prefix-cache hit rate | utilization "
        "| hot spot | busiest / mean while one has room: P99, max (samples) | client CPU (cores, share) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for strategy in strategies:
        mine = [r for r in results if r.workload == workload and r.strategy == strategy]
        if not mine:
            continue

        def cell(field: str, fmt: str, mine: list[Result] = mine) -> str:
            return _cell([getattr(r, field) for r in mine], fmt)

        samples = sum(r.spread_samples for r in mine)
        cells = [
            strategy,
            cell("rps", ".1f"),
            cell("tokens_per_s", ".0f"),
            cell("ttft_p50", ".2f") + " s",
            cell("ttft_p90", ".2f") + " s",
            cell("hit_rate", ".1%"),
            cell("utilization", ".0%"),
            cell("hot_spot", ".2f"),
            f"{cell('spread_p99', '.2f')}, {cell('spread_max', '.2f')} ({samples})",
            f"{cell('client_cores', '.2f')}, {cell('client_share', '.0%')}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _pairs(results: list[Result], workload: str) -> list[tuple[Result, Result]]:
    by_key = {(r.workload, r.strategy, r.repeat): r for r in results}
    out = []
    for r in results:
        if r.workload == workload and r.strategy == "prefix":
            base = by_key.get((workload, "least_loaded", r.repeat))
            if base is not None:
                out.append((r, base))
    return out


def targets(results: list[Result]) -> list[tuple[str, bool, str]]:
    """(target, passed by the median over the repetitions, the ratio in each) per workload present."""
    checks: list[tuple[str, bool, str]] = []
    for workload in ("chat", "docs"):
        pairs = _pairs(results, workload)
        if not pairs:
            continue
        hit = [p.hit_rate / b.hit_rate if p.hit_rate and b.hit_rate else 0.0 for p, b in pairs]
        rps = [p.rps / b.rps for p, b in pairs]
        ttft = [p.ttft_p90 / b.ttft_p90 if p.ttft_p90 and b.ttft_p90 else math.inf for p, b in pairs]
        checks.append((f"{workload}: hit rate >= 2x least_loaded", statistics.median(hit) >= 2, _ratios(hit)))
        faster = statistics.median(rps) >= 1.3
        quicker = statistics.median(ttft) <= 0.5 and statistics.median(rps) >= 0.97
        checks.append(
            (
                f"{workload}: throughput >= 1.3x least_loaded (or TTFT P90 <= 0.5x at equal throughput)",
                faster or quicker,
                f"throughput {_ratios(rps)}; TTFT P90 {_ratios(ttft)}",
            )
        )
    pairs = _pairs(results, "distinct")
    if pairs:
        rps = [p.rps / b.rps for p, b in pairs]
        name = "distinct: throughput >= 0.97x least_loaded"
        checks.append((name, statistics.median(rps) >= 0.97, _ratios(rps)))
    prefix = [r for r in results if r.strategy == "prefix" and r.hot_spot is not None]
    if prefix:
        worst = max(r.hot_spot or 0.0 for r in prefix)
        checks.append(
            (
                f"prefix: the busiest backend's mean load <= {SPREAD_BOUND}x the mean per backend",
                worst <= SPREAD_BOUND,
                f"largest {worst:.2f}",
            )
        )
    return checks


def _ratios(values: list[float]) -> str:
    """The median, then each repetition's value."""
    each = ", ".join(f"{v:.2f}x" for v in values)
    return f"{statistics.median(values):.2f}x" + (f" ({each})" if len(values) > 1 else "")
