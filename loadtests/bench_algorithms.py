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

    .venv/bin/python -m loadtests.bench_algorithms [--ttft S] [--tpot S] [--e2e S] [--clients 48]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.control.algorithms import LimitAlgorithm, create
from gateway.control.limiter import Limiter
from gateway.control.slots import Slot
from gateway.sim.closedloop import VirtualClients
from gateway.sim.engine import Engine
from gateway.sim.engine import Sequence as EngineSequence
from gateway.sim.profiles import Profile, get_profile
from gateway.types import SLA, EngineStats, Sample, Signal
from loadtests.stats import p90

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
    loop = VirtualClients(
        Engine(base, random.Random(seed)), clients, prompt_len=prompt_len, max_tokens=max_tokens
    )
    limiter = Limiter(algorithm, clock=loop.clock, min_samples=min_samples)
    run = Run(label or algorithm.name, duration)
    held: dict[int, tuple[Slot, float]] = {}
    changes = sorted(slowdowns)
    next_control = interval
    while loop.now < duration:
        while changes and changes[0][0] <= loop.now:
            loop.engine.profile = slowed(base, changes.pop(0)[1])
        for seq in loop.send(admit=limiter.has_room):
            held[seq.uid] = (limiter.acquire(), loop.now)
        report = loop.step(idle_until=next_control)
        for seq in report.finished if report is not None else ():
            run.finished.append(_release(held.pop(seq.uid), seq, loop.now))
        while loop.now >= next_control:
            _control_tick(limiter, loop, run, base.kv_capacity_tokens)
            next_control += interval
    return run


def _release(held: tuple[Slot, float], seq: EngineSequence, now: float) -> Finished:
    """Give the finished request's slot back with its sample, as the gateway does at a stream's end."""
    slot, dispatched = held
    assert seq.first_token_at is not None
    ttft = seq.first_token_at - dispatched
    n = seq.num_output
    tpot = (now - seq.first_token_at) / (n - 1) if n > 1 else None
    slot.release(
        Sample(
            dispatched_at=dispatched,
            e2e=now - dispatched,
            ttft=ttft,
            tpot=tpot,
            prompt_tokens=seq.prompt_len,
            output_tokens=n,
        )
    )
    return Finished(dispatched, now, ttft, tpot, now - dispatched, n)


def _control_tick(limiter: Limiter, loop: VirtualClients, run: Run, kv_capacity_tokens: int) -> None:
    """One tick of the control loop: the engine "scraped", then the limiter decides."""
    engine = loop.engine
    limiter.observe(
        EngineStats(
            at=loop.now,
            kv_usage=engine.kv_usage,
            waiting=float(engine.num_waiting),
            running=float(engine.num_running),
            preemptions_total=float(engine.preemptions_total),
            kv_capacity_tokens=kv_capacity_tokens,
        )
    )
    queued = loop.queued()
    decision = limiter.tick(queued=queued)
    run.ticks.append(
        Tick(loop.now, limiter.limit, limiter.inflight, queued, engine.kv_usage, decision.reason)
    )
    run.preemptions.append((loop.now, engine.preemptions_total))


def _p90(values: Sequence[float]) -> float:
    """P90 of the values; NaN for none, so that a ratio over it reads as unknown."""
    value = p90(values)
    return math.nan if value is None else value


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
    ratios = [_p90([v for f in done if (v := f.value(s)) is not None]) / t for s, t in sla.targets().items()]
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
        p90={s: _p90([v for f in done if (v := f.value(s)) is not None]) for s in targets},
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
