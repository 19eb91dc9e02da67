"""The routing benchmark in virtual time: the simulator's engine model and the gateway's strategies, no I/O.

Four `Engine`s (gateway.sim.engine, the model the simulated servers run) step on one virtual
timeline. In front of them a stand-in for the gateway holds each backend's fixed limit, a FIFO
queue and late binding as the admission queue does (the next `lookahead` waiters compete for a
freed slot, each passed over at most `lookahead` times), and asks the gateway's own routing
strategy (gateway.routing) which request goes where. The users are the benchmark's workloads
(loadtests.routing.workloads): closed loop, exponential think times at full engine speed.

What it is for: the KV-cache size decides whether routing by prefix can matter, and a sweep of
sizes over HTTP would take an hour of a shared machine; here one run takes seconds and the same
seed gives the same numbers. What it leaves out, which `make bench-routing` has: the network and
the gateway's own CPU, streaming, tenant fairness, KV usage read from a scrape (here it is read at
every decision), and a machine that slows the engines.

    .venv/bin/python -m loadtests.routing.replay --kv-blocks 1536 2048 4096 10240
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import sys
from dataclasses import dataclass, field

import orjson

from gateway import routing
from gateway.control.window import nearest_rank
from gateway.routing import Load, RouteKey
from gateway.sim import tokens
from gateway.sim.engine import Engine, Sequence, StepPlan
from gateway.sim.profiles import Profile, get_profile
from loadtests.routing import workloads

# The HTTP benchmark's engine (loadtests/routing/run.py): Llama-3-8B, the A100 step times.
STEP_TIMES = {"step_mem": 0.0097, "step_per_token": 6.6e-05, "step_per_kv_token": 8e-08}


@dataclass(frozen=True, slots=True)
class Setup:
    backends: int = 4
    limit: int = 16
    users: int = 200
    max_tokens: int = 32
    lookahead: int = 16
    imbalance: float = 0.2
    warmup: float = 40.0
    """Virtual seconds before the window, long enough for the caches and conversations to settle."""
    window: float = 60.0


@dataclass(frozen=True, slots=True)
class Outcome:
    rps: float
    ttft_p90: float | None
    hit_rate: float | None
    preemptions: int
    hot_spot: float | None
    """The busiest backend's mean in-flight count over the mean per backend, over the window."""


@dataclass(slots=True)
class _Request:
    user: int
    route: RouteKey
    tokens: int
    hashes: list[int]
    sent: float
    passed: int = 0


@dataclass(slots=True)
class _Gateway:
    """Limits, the queue and the strategy: what the gateway decides, none of how it does it."""

    setup: Setup
    strategy: routing.Strategy
    engines: list[Engine]
    kv_tokens: int
    inflight: list[int] = field(default_factory=list)
    queue: list[_Request] = field(default_factory=list)

    def loads(self) -> list[Load]:
        limit = self.setup.limit
        return [
            Load(f"b{i}", n, limit, n < limit, e.kv_usage, self.kv_tokens)
            for i, (n, e) in enumerate(zip(self.inflight, self.engines, strict=True))
        ]

    def dispatch(self) -> list[tuple[int, _Request]]:
        """Pair waiters with free slots while the strategy finds a pair."""
        out: list[tuple[int, _Request]] = []
        look = self.setup.lookahead
        while self.queue and min(self.inflight) < self.setup.limit:
            head = self.queue[0]
            offered = self.queue[:1] if head.passed >= look else self.queue[:look]
            loads = self.loads()
            choice = self.strategy.choose("m", [r.route for r in offered], loads)
            if choice is None:
                break
            request = offered[choice.request]
            self.strategy.routed("m", request.route, loads[choice.backend], choice)
            for passed in offered[: choice.request]:
                passed.passed += 1
            del self.queue[self.queue.index(request)]
            self.inflight[choice.backend] += 1
            out.append((choice.backend, request))
        return out


def _prompt(body: dict[str, object], profile: Profile) -> tuple[int, list[int]]:
    messages = body.get("messages")
    if isinstance(messages, list):
        n, rendered = tokens.chat_prompt([(m["role"], m["content"]) for m in messages], profile)
    else:
        n, rendered = tokens.text_prompt(str(body["prompt"]), profile)
    return n, tokens.block_hashes(rendered, n, profile.block_size)


class _Timeline:
    """One replay's virtual timeline: the events in order, each backend's step in progress, and
    what is measured inside the window."""

    def __init__(
        self, setup: Setup, profile: Profile, gateway: _Gateway, users: workloads.Workload, rng: random.Random
    ) -> None:
        self.setup = setup
        self.profile = profile
        self.gateway = gateway
        self.engines = gateway.engines
        self.users = users
        self.rng = rng
        self.start, self.end = setup.warmup, setup.warmup + setup.window
        # Events: (virtual time, order, kind, who): kind 0 a user sends, 1 a backend's step ends.
        self.events: list[tuple[float, int, int, int]] = []
        self.order = 0
        self.plans: list[StepPlan | None] = [None] * setup.backends
        self.running: dict[tuple[int, int], _Request] = {}
        self.done = 0
        self.ttfts: list[float] = []
        self.queries = self.hits = 0
        self.inflight_sum = [0.0] * setup.backends

    def push(self, at: float, kind: int, who: int) -> None:
        self.order += 1
        heapq.heappush(self.events, (at, self.order, kind, who))

    def run(self) -> None:
        """Play the events until the window ends."""
        last = 0.0
        while self.events:
            now, _, kind, who = heapq.heappop(self.events)
            if now > self.end:
                break
            if now > self.start:
                for b, n in enumerate(self.gateway.inflight):
                    self.inflight_sum[b] += n * (now - max(last, self.start))
            last = now
            if kind == 0:
                self._send(who, now)
            else:
                self._step_ended(who, now)

    def outcome(self) -> Outcome:
        mean = statistics.fmean(self.inflight_sum)
        return Outcome(
            rps=self.done / self.setup.window,
            ttft_p90=nearest_rank(sorted(self.ttfts), 0.9),
            hit_rate=self.hits / self.queries if self.queries else None,
            preemptions=sum(e.preemptions_total for e in self.engines),
            hot_spot=max(self.inflight_sum) / mean if mean else None,
        )

    def _send(self, user: int, now: float) -> None:
        body = orjson.loads(self.users.body(user))
        n, hashes = _prompt(body, self.profile)
        self.gateway.queue.append(_Request(user, RouteKey.from_body(body), n, hashes, now))
        self._dispatch(now)

    def _step_ended(self, b: int, now: float) -> None:
        plan, self.plans[b] = self.plans[b], None
        assert plan is not None
        report = self.engines[b].complete(plan, now)
        if now > self.start:
            self.queries += report.prefix_queries
            self.hits += report.prefix_hits
        for seq in report.emitted:
            if seq.num_output == 1 and now > self.start:
                self.ttfts.append(now - self.running[(b, seq.uid)].sent)
        for seq in report.finished:
            request = self.running.pop((b, seq.uid))
            self.gateway.inflight[b] -= 1
            self.done += now > self.start
            self.users.answered(request.user)
            self.push(now + self.rng.expovariate(1 / self.users.think), 0, request.user)
        self._dispatch(now)
        self._step(b, now)

    def _step(self, b: int, now: float) -> None:
        engine = self.engines[b]
        if self.plans[b] is None and engine.has_work:
            plan = engine.schedule(now)
            if not plan.empty:
                self.plans[b] = plan
                self.push(now + plan.duration, 1, b)

    def _dispatch(self, now: float) -> None:
        for b, request in self.gateway.dispatch():
            seq: Sequence = self.engines[b].add(
                request.tokens, request.hashes, now, max_tokens=self.setup.max_tokens, ignore_eos=True
            )
            self.running[(b, seq.uid)] = request
            self._step(b, now)


def replay(workload: str, strategy: str, kv_blocks: int, seed: int, setup: Setup = Setup()) -> Outcome:
    """One strategy on one workload with `kv_blocks` blocks of 16 tokens per backend."""
    profile = get_profile("llama3-8b-h100", num_gpu_blocks=kv_blocks, **STEP_TIMES)
    engines = [Engine(profile, random.Random(seed * 10 + i)) for i in range(setup.backends)]
    chooser = routing.create(strategy, setup.imbalance)
    gateway = _Gateway(setup, chooser, engines, profile.kv_capacity_tokens, [0] * setup.backends)
    users = workloads.make(workload, "m", setup.users, setup.max_tokens, seed)
    rng = random.Random(seed)
    timeline = _Timeline(setup, profile, gateway, users, rng)
    for u in range(setup.users):
        timeline.push(rng.uniform(0, users.think), 0, u)
    timeline.run()
    return timeline.outcome()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m loadtests.routing.replay", description=__doc__.split("\n")[0])
    p.add_argument("--workloads", nargs="+", default=list(workloads.WORKLOADS), choices=workloads.WORKLOADS)
    p.add_argument("--strategies", nargs="+", default=["prefix", "least_loaded"], choices=routing.STRATEGIES)
    p.add_argument("--kv-blocks", nargs="+", type=int, default=[1536, 2048, 3072, 4096, 10240])
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--imbalance", type=float, default=Setup().imbalance)
    p.add_argument("--lookahead", type=int, default=Setup().lookahead)
    return p


def _cell(values: list[float | None], fmt: str) -> str:
    got = [v for v in values if v is not None]
    return fmt.format(statistics.median(got)) if got else "-"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup = Setup(imbalance=args.imbalance, lookahead=args.lookahead)
    base = args.strategies[-1]
    rows = [
        "| workload | KV tokens per backend | strategy | req/s | TTFT P90 | prefix-cache hit rate "
        f"| preemptions | req/s / {base} | hit rate / {base} |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for workload in args.workloads:
        for blocks in args.kv_blocks:
            got = {
                s: [replay(workload, s, blocks, seed, setup) for seed in args.seeds] for s in args.strategies
            }
            for s, outs in got.items():
                ref = got[base]
                rps = [o.rps / r.rps if r.rps else None for o, r in zip(outs, ref, strict=True)]
                hit = [
                    o.hit_rate / r.hit_rate if o.hit_rate is not None and r.hit_rate else None
                    for o, r in zip(outs, ref, strict=True)
                ]
                rows.append(
                    f"| {workload} | {blocks * 16:,} | {s} | {_cell([o.rps for o in outs], '{:.1f}')} "
                    f"| {_cell([o.ttft_p90 for o in outs], '{:.2f} s')} "
                    f"| {_cell([o.hit_rate for o in outs], '{:.1%}')} "
                    f"| {_cell([float(o.preemptions) for o in outs], '{:.0f}')} "
                    f"| {_cell(rps, '{:.2f}x')} | {_cell(hit, '{:.2f}x')} |"
                )
            print("\n".join(rows[-len(args.strategies) :]), file=sys.stderr, flush=True)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
