"""Each limit algorithm in a closed loop against the simulated vLLM engine, in virtual time.

A `Limiter` gates a `gateway.sim.engine.Engine` (profile `tiny-cpu`: 8,192 KV tokens, fitted to a
real vLLM CPU engine) exactly as the gateway would: requests wait in a FIFO queue until the limiter
has room, a sample is recorded when each finishes, the engine's metrics are "scraped" every second
and the control loop ticks every second. Time is the engine's modelled step time, so a five-minute
scenario runs in about a second. Nothing sleeps and nothing touches the network.

Scenarios: (a) steady overload, `clients` closed-loop clients (3x the knee by default); (b) the same
load with the backend's step time doubled (capacity halved) from 100 s to 200 s.

Printed per algorithm and phase: mean limit, the worst P90 / target over the SLA signals, output
tokens/s, share of requests that met every target, preemptions, and the convergence time: from
the start of the phase until every later 5-second bin has P90 within target + 10%.

    .venv/bin/python loadtests/bench_algorithms.py [--ttft S] [--tpot S] [--e2e S] [--clients 48]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.limiter import Limiter, Slot
from gateway.limits import LimitAlgorithm, create
from gateway.sim.engine import Engine
from gateway.sim.profiles import Profile, get_profile
from gateway.types import SLA, BackendSignals, Sample, Signal

BIN = 5.0
STEP_FIELDS = ("step_base", "step_mem", "step_per_token", "step_per_kv_token", "step_per_seq")


@dataclass(frozen=True, slots=True)
class Finished:
    dispatched_at: float
    finished_at: float
    ttft: float
    tpot: float | None
    e2e: float
    output_tokens: int

    def value(self, signal: Signal) -> float | None:
        return self.ttft if signal == "ttft" else self.tpot if signal == "tpot" else self.e2e


@dataclass(frozen=True, slots=True)
class Tick:
    at: float
    limit: int
    inflight: int
    queued: int
    kv_usage: float
    reason: str


@dataclass
class Run:
    label: str
    duration: float
    finished: list[Finished] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    preemptions: list[tuple[float, int]] = field(default_factory=list)


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def slowed(profile: Profile, factor: float) -> Profile:
    """The profile with every step-time term multiplied by `factor` (2.0 halves capacity)."""
    return dataclasses.replace(profile, **{f: getattr(profile, f) * factor for f in STEP_FIELDS})


def simulate(
    algorithm: LimitAlgorithm,
    *,
    label: str = "",
    profile: Profile | None = None,
    clients: int = 48,
    duration: float = 300.0,
    prompt_len: int = 232,
    max_tokens: int = 300,
    slowdowns: Sequence[tuple[float, float]] = (),
    interval: float = 1.0,
    min_samples: int = 8,
    seed: int = 0,
) -> Run:
    """Run `clients` closed-loop clients through a limiter into one simulated engine.

    `slowdowns` is a list of (at, factor): from `at` on, step time is the base profile's x factor.
    """
    base = profile or get_profile("tiny-cpu")
    engine = Engine(base, random.Random(seed))
    clock = VirtualClock()
    limiter = Limiter(algorithm, clock=clock, min_samples=min_samples)
    run = Run(label or algorithm.name, duration)
    queue: deque[float] = deque(0.0 for _ in range(clients))
    held: dict[int, tuple[Slot, float]] = {}
    changes = sorted(slowdowns)
    full_blocks = prompt_len // base.block_size
    next_control = interval
    request_no = 0
    while clock.now < duration:
        while changes and changes[0][0] <= clock.now:
            engine.profile = slowed(base, changes.pop(0)[1])
        while queue and queue[0] <= clock.now and limiter.has_room():
            queue.popleft()
            request_no += 1
            hashes = [hash((request_no, j)) for j in range(full_blocks)]
            seq = engine.add(prompt_len, hashes, clock.now, max_tokens=max_tokens, ignore_eos=True)
            held[seq.uid] = (limiter.acquire(), clock.now)
        plan = engine.schedule(clock.now)
        if plan.empty:
            clock.now = min(next_control, queue[0] if queue else next_control)
            clock.now = max(clock.now, plan.started_at)
        else:
            clock.now += plan.duration
            report = engine.complete(plan, clock.now)
            for seq in report.finished:
                slot, dispatched = held.pop(seq.uid)
                assert seq.first_token_at is not None
                ttft = seq.first_token_at - dispatched
                n = seq.num_output
                tpot = (clock.now - seq.first_token_at) / (n - 1) if n > 1 else None
                slot.release(
                    Sample(
                        dispatched_at=dispatched,
                        e2e=clock.now - dispatched,
                        ttft=ttft,
                        tpot=tpot,
                        prompt_tokens=seq.prompt_len,
                        output_tokens=n,
                    )
                )
                run.finished.append(Finished(dispatched, clock.now, ttft, tpot, clock.now - dispatched, n))
                queue.append(clock.now)
        while clock.now >= next_control:
            limiter.observe(
                BackendSignals(
                    at=clock.now,
                    kv_usage=engine.kv_usage,
                    waiting=float(engine.num_waiting),
                    running=float(engine.num_running),
                    preemptions_total=float(engine.preemptions_total),
                    kv_capacity_tokens=base.kv_capacity_tokens,
                )
            )
            queued = sum(1 for t in queue if t <= clock.now)
            decision = limiter.tick(queued=queued)
            run.ticks.append(
                Tick(
                    clock.now,
                    limiter.limit,
                    limiter.inflight,
                    queued,
                    engine.kv_usage,
                    decision.reason,
                )
            )
            run.preemptions.append((clock.now, engine.preemptions_total))
            next_control += interval
    return run


def p90(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(1, math.ceil(0.9 * len(ordered))) - 1]


@dataclass(frozen=True, slots=True)
class PhaseStats:
    mean_limit: float
    p90: dict[Signal, float]
    worst_ratio: float
    """Largest P90 / target over the SLA's signals."""
    tokens_per_s: float
    met_share: float
    """Share of requests that met every SLA target (the P90 SLA asks for 90%)."""
    preemptions: int
    converged_after: float | None


def _worst(done: Sequence[Finished], sla: SLA) -> float:
    ratios = [p90([v for f in done if (v := f.value(s)) is not None]) / t for s, t in sla.targets().items()]
    return max(ratios, default=math.nan)


def phase_stats(run: Run, start: float, end: float, sla: SLA) -> PhaseStats:
    """Numbers over [start, end); latency of requests that finished in it."""
    done = [f for f in run.finished if start <= f.finished_at < end]
    limits = [t.limit for t in run.ticks if start <= t.at < end]
    pre = [n for t, n in run.preemptions if start <= t < end]
    bins: list[float] = []
    b = start
    while b + BIN <= end:
        bins.append(_worst([f for f in done if b <= f.finished_at < b + BIN], sla))
        b += BIN
    converged: float | None = None
    for i in range(len(bins)):
        if all(not r > 1.1 for r in bins[i:]):
            converged = i * BIN
            break
    targets = sla.targets()

    def met(f: Finished) -> bool:
        return all((v := f.value(s)) is None or v <= t for s, t in targets.items())

    return PhaseStats(
        mean_limit=sum(limits) / len(limits) if limits else math.nan,
        p90={s: p90([v for f in done if (v := f.value(s)) is not None]) for s in targets},
        worst_ratio=_worst(done, sla),
        tokens_per_s=sum(f.output_tokens for f in done) / (end - start),
        met_share=sum(met(f) for f in done) / len(done) if done else math.nan,
        preemptions=(pre[-1] - pre[0]) if pre else 0,
        converged_after=converged,
    )


def candidates(sla: SLA, fixed: Sequence[int]) -> list[tuple[str, LimitAlgorithm]]:
    out: list[tuple[str, LimitAlgorithm]] = [
        (name, create(name, {}, sla)) for name in ("sla", "aimd", "gradient")
    ]
    out += [(f"fixed {n}", create("fixed", {"limit": n}, sla)) for n in fixed]
    return out


def report(title: str, rows: list[tuple[str, list[PhaseStats]]], phases: list[str]) -> None:
    print(f"\n== {title}")
    print(
        f"{'algorithm':<10} {'phase':<10} {'limit':>6} {'P90/target':>10} {'met':>5} "
        f"{'tok/s':>6} {'preempt':>8} {'converged':>9}"
    )
    for label, stats in rows:
        for phase, s in zip(phases, stats, strict=True):
            conv = "never" if s.converged_after is None else f"{s.converged_after:.0f}s"
            print(
                f"{label:<10} {phase:<10} {s.mean_limit:6.1f} {s.worst_ratio:10.2f} "
                f"{s.met_share:5.0%} {s.tokens_per_s:6.0f} {s.preemptions:8d} {conv:>9}"
            )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ttft", type=float, help="SLA: TTFT P90 target, seconds")
    parser.add_argument("--tpot", type=float, help="SLA: TPOT P90 target, seconds")
    parser.add_argument("--e2e", type=float, help="SLA: end-to-end P90 target, seconds")
    parser.add_argument("--clients", type=int, default=48)
    parser.add_argument("--duration", type=float, default=300.0)
    parser.add_argument("--fixed", type=int, nargs="*", default=[4, 8, 12, 16, 20])
    args = parser.parse_args(argv)
    sla = SLA(ttft_p90=args.ttft, tpot_p90=args.tpot, e2e_p90=args.e2e)
    if not sla.targets():
        sla = SLA(ttft_p90=0.5)
    d = args.duration
    started = time.perf_counter()
    targets = ", ".join(f"{s} P90 <= {t:g}s" for s, t in sla.targets().items())

    rows: list[tuple[str, list[PhaseStats]]] = []
    for label, algo in candidates(sla, args.fixed):
        run = simulate(algo, label=label, clients=args.clients, duration=d)
        rows.append((label, [phase_stats(run, 0, d / 3, sla), phase_stats(run, d / 3, d, sla)]))
    report(
        f"(a) steady overload: {args.clients} closed-loop clients; SLA {targets}",
        rows,
        ["warm-up", "steady"],
    )

    rows = []
    cuts = [0.0, d / 3, 2 * d / 3, d]
    for label, algo in candidates(sla, args.fixed):
        run = simulate(
            algo,
            label=label,
            clients=args.clients,
            duration=d,
            slowdowns=[(cuts[1], 2.0), (cuts[2], 1.0)],
        )
        rows.append((label, [phase_stats(run, a, b, sla) for a, b in itertools.pairwise(cuts)]))
    report(
        f"(b) capacity halves at {cuts[1]:.0f}s and recovers at {cuts[2]:.0f}s; SLA {targets}",
        rows,
        ["normal", "halved", "recovered"],
    )
    print(f"\n(simulated {2 * len(rows) * d:.0f}s in {time.perf_counter() - started:.1f}s)")


if __name__ == "__main__":
    main()
