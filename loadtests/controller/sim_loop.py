"""Closed-loop clients through a `Limiter` into the simulated vLLM engine and its front end, in
virtual time: the gateway as the controller sees it, fast and deterministic.

Clients send one request each, wait for its end, and send the next. Through the gateway a request
waits in a FIFO queue until the limiter has room; without a limiter (`algorithm=None`, "direct")
it goes straight to the server. The server's front end (gateway.sim.frontend) holds it before the
engine counts it and streams its tokens in bursts; the engine (gateway.sim.engine) batches, fills
its KV cache and preempts like vLLM. Every `interval` seconds the engine's metrics are scraped
(running, waiting, KV, preemptions, and the window P90 of the engine's own TTFT and e2e) and the
control loop ticks. Scheduled changes model what a real host does: capacity steps (`slowdowns`),
front-end delay steps (`holds`) and clients that bypass the gateway (`bypass`).
Time is the engine's modelled step time: nothing sleeps and nothing touches the network.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.control.algorithms import LimitAlgorithm
from gateway.control.limiter import Limiter
from gateway.control.slots import Slot
from gateway.control.window import nearest_rank
from gateway.sim.engine import Engine
from gateway.sim.engine import Sequence as Seq
from gateway.sim.frontend import FrontEnd
from gateway.sim.profiles import Profile, get_profile
from gateway.types import SLA, EngineStats, Sample
from loadtests.controller.matrix import Workload

STEP_FIELDS = ("step_base", "step_mem", "step_per_token", "step_per_kv_token", "step_per_seq")


@dataclass(frozen=True, slots=True)
class Done:
    """One request that went through the gateway (or straight to the server) and finished."""

    finished_at: float
    ttft: float | None
    tpot: float | None
    e2e: float
    output_tokens: int
    queued: float = 0.0
    """Seconds it waited in the gateway's queue before it was sent (not in ttft or e2e)."""


@dataclass(frozen=True, slots=True)
class Tick:
    at: float
    limit: int
    inflight: int
    engine_count: int
    """vLLM's running + waiting: what the engine sees of all traffic."""
    reason: str


@dataclass
class Run:
    duration: float
    done: list[Done] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    states: list[dict[str, object]] = field(default_factory=list)
    """The limiter's `state()` at each tick."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """What happens to the server during a run, as (from time, value) steps."""

    slowdowns: Sequence[tuple[float, float]] = ()
    """Step time x factor from that time on (2.0 halves capacity)."""
    holds: Sequence[tuple[float, float]] = ()
    """Front-end hold (seconds per request, outside the engine) from that time on."""
    bypass: Sequence[tuple[float, float, int]] = ()
    """(start, end, clients): closed-loop clients that send straight to the server."""
    gateway_until: float = float("inf")
    """The gateway's clients send no new request after this time (the gateway goes idle)."""
    stalls: tuple[float, float] | None = None
    """(every, seconds): the front end hands no request to the engine for `seconds` out of every
    `every` (a CPU-starved host descheduling the API server), from `every` on."""
    arrivals: float = 0.0
    """Open-loop requests per second to the gateway (Poisson), beside any closed-loop clients: they
    arrive whether or not earlier ones finished, and send nothing when they end."""
    read_first: bool = False
    """The limiter reads the engine's metrics before the first request, as `llm-gateway serve`
    does, so a fresh gateway knows the KV cache and lets its first burst in at once; otherwise the
    first reading comes with the first tick (the tables of docs/benchmarks.md are made so)."""

    def after_stalls(self, ready: float) -> float:
        """When a request the front end would hand over at `ready` reaches the engine: at the end
        of the stall `ready` falls in, if any."""
        if self.stalls is None:
            return ready
        every, seconds = self.stalls
        into = ready % every
        return ready if ready < every or into >= seconds else ready - into + seconds


class Progress:
    """A stream's progress as the proxy sees it (gateway.types.StreamProgress)."""

    __slots__ = ("events", "first_at", "last_at")

    def __init__(self) -> None:
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.events = 0


@dataclass(eq=False, slots=True)
class _Request:
    sent_at: float
    prompt_len: int
    max_tokens: int
    hashes: list[int]
    gateway: bool
    arrived_at: float = 0.0
    closed: bool = True
    """Sent by a closed-loop client, which sends the next when it ends."""
    slot: Slot | None = None
    progress: Progress = field(default_factory=Progress)


def slowed(profile: Profile, factor: float) -> Profile:
    """The profile with every step-time term multiplied by `factor`."""
    return dataclasses.replace(profile, **{f: getattr(profile, f) * factor for f in STEP_FIELDS})


class Loop:
    def __init__(
        self,
        workload: Workload,
        algorithm: LimitAlgorithm | None,
        sla: SLA,
        *,
        profile: Profile,
        scenario: Scenario,
        clients: int | None,
        interval: float,
        min_samples: int,
        seed: int,
        declare: bool = True,
    ) -> None:
        self.workload = workload
        self.declare = declare
        self.base = profile
        self.engine = Engine(profile, random.Random(seed))
        self.rng = random.Random(seed + 1)
        self.now = 0.0
        self.front = FrontEnd(profile.frontend_overhead, profile.frontend_busy, profile.stream_burst)
        self.limiter = (
            None
            if algorithm is None
            else Limiter(algorithm, clock=lambda: self.now, min_samples=min_samples, sla=sla)
        )
        self.scenario = scenario
        self.clients = workload.clients if clients is None else clients
        self.interval = interval
        self.queue: deque[_Request] = deque()
        self.pending: list[tuple[float, int, _Request]] = []
        self.live: dict[int, _Request] = {}
        self.bypass_active = 0
        self.engine_ttfts: list[float] = []
        self.engine_e2es: list[float] = []
        self.generated = 0  # output tokens the engine generated since the last scrape
        self.prefix_queries = 0  # prompt tokens looked up in the prefix cache since the last scrape
        self.prefix_hits = 0  # of those, the ones it held
        self.scraped_at = 0.0
        # Request ids start at 1: (0, j) is the shared prefix's block j, the same in every run.
        self.shared = [hash((0, j)) for j in range(workload.shared_prefix_tokens // profile.block_size)]
        self._uid = 0
        self._sent = itertools.count()
        """Order of sending: breaks ties between requests ready at the same time, first sent first."""

    def request(self, gateway: bool) -> _Request:
        w, block = self.workload, self.base.block_size
        prompt = self.rng.randint(*w.prompt_tokens)
        self._uid += 1
        own = [hash((self._uid, j)) for j in range(prompt // block)]
        hashes = (self.shared + own[len(self.shared) :])[: prompt // block]
        return _Request(self.now, prompt, self.rng.randint(*w.output_tokens), hashes, gateway, self.now)

    def send(self, req: _Request) -> None:
        if req.gateway and self.limiter is not None:
            self.queue.append(req)
        else:
            self.to_server(req)

    def to_server(self, req: _Request) -> None:
        ready = self.scenario.after_stalls(self.front.ready_at(self.now))
        heapq.heappush(self.pending, (ready, next(self._sent), req))

    def admit(self) -> None:
        lim = self.limiter
        while lim is not None and self.queue and lim.has_room():
            req = self.queue.popleft()
            req.slot = lim.acquire()
            req.sent_at = self.now
            most = req.prompt_len + req.max_tokens if self.declare else None
            req.slot.sent(self.now, req.progress if self.workload.stream else None, most)
            self.to_server(req)
        while self.pending and self.pending[0][0] <= self.now:
            _, _, req = heapq.heappop(self.pending)
            seq = self.engine.add(
                req.prompt_len, req.hashes, self.now, max_tokens=req.max_tokens, ignore_eos=True
            )
            self.live[seq.uid] = req

    def deliver(self, seq: Seq, finished: bool, run: Run) -> None:
        req = self.live[seq.uid]
        if not self.front.delivers(seq.num_output, finished):
            return
        p = req.progress
        if p.first_at is None:
            p.first_at = self.now
            if req.slot is not None and self.workload.stream:
                req.slot.first_token(req.sent_at, self.now - req.sent_at)
        p.last_at = self.now
        p.events += 1  # one event per delivery, however many tokens it carries, as the proxy counts
        if not finished:
            return
        del self.live[seq.uid]
        n = seq.num_output
        ttft = p.first_at - req.sent_at if self.workload.stream else None
        tpot = (self.now - p.first_at) / (n - 1) if self.workload.stream and n > 1 else None
        e2e = self.now - req.sent_at
        if req.slot is not None:
            req.slot.release(Sample(req.sent_at, e2e, ttft, tpot, n, req.prompt_len))
        if req.gateway:
            run.done.append(Done(self.now, ttft, tpot, e2e, n, req.sent_at - req.arrived_at))
            if req.closed and self.now < self.scenario.gateway_until:
                self.send(self.request(True))
        elif self.bypass_active > 0:
            self.send(self.request(False))

    def scrape(self) -> EngineStats:
        e = self.engine
        ttfts, e2es = sorted(self.engine_ttfts), sorted(self.engine_e2es)
        self.engine_ttfts, self.engine_e2es = [], []
        elapsed, self.scraped_at = self.now - self.scraped_at, self.now
        generated, self.generated = self.generated, 0
        queries, hits, self.prefix_queries, self.prefix_hits = self.prefix_queries, self.prefix_hits, 0, 0
        return EngineStats(
            at=self.now,
            kv_usage=e.kv_usage,
            waiting=float(e.num_waiting),
            running=float(e.num_running),
            preemptions_total=float(e.preemptions_total),
            kv_capacity_tokens=self.base.kv_capacity_tokens,
            ttft_p90=nearest_rank(ttfts, 0.9),
            finished=float(len(e2es)),
            generation_rate=generated / elapsed if elapsed > 0 else None,
            prefix_hit_share=hits / queries if queries > 0 else None,
        )

    def apply_scenario(self, events: list[tuple[float, str, float]]) -> None:
        while events and events[0][0] <= self.now:
            _, kind, value = events.pop(0)
            if kind == "speed":
                self.engine.profile = slowed(self.base, value)
            elif kind == "hold":
                self.front.hold = value
            elif kind == "bypass_on":
                self.bypass_active += int(value)
                for _ in range(int(value)):
                    self.send(self.request(False))
            else:
                self.bypass_active -= int(value)

    def events(self) -> list[tuple[float, str, float]]:
        s = self.scenario
        out = [(t, "speed", f) for t, f in s.slowdowns] + [(t, "hold", h) for t, h in s.holds]
        for start, end, n in s.bypass:
            out += [(start, "bypass_on", float(n)), (end, "bypass_off", float(n))]
        return sorted(out)

    def run(self, duration: float) -> Run:
        run = Run(duration)
        events = self.events()
        if self.limiter is not None and self.scenario.read_first:
            self.limiter.observe(self.scrape())
        for _ in range(self.clients):
            self.send(self.request(True))
        next_tick = self.interval
        rate = self.scenario.arrivals
        next_arrival = self.rng.expovariate(rate) if rate > 0 else float("inf")
        while self.now < duration:
            self.apply_scenario(events)
            while next_arrival <= self.now:
                req = self.request(True)
                req.sent_at = req.arrived_at = next_arrival
                req.closed = False
                self.send(req)
                next_arrival += self.rng.expovariate(rate)
            self.admit()
            plan = self.engine.schedule(self.now)
            if plan.empty:
                wake = [next_tick, next_arrival, *(t for t, _, _ in events[:1])]
                wake += [t for t, _, _ in self.pending[:1]]
                self.now = max(self.now, min(wake))
            else:
                self.now += plan.duration
                report = self.engine.complete(plan, self.now)
                self.engine_ttfts += report.ttfts
                self.engine_e2es += [self.now - s.arrival for s in report.finished]
                self.generated += report.generation_tokens
                self.prefix_queries += report.prefix_queries
                self.prefix_hits += report.prefix_hits
                done = {s.uid for s in report.finished}
                for seq in report.emitted:
                    self.deliver(seq, seq.uid in done, run)
            while self.now >= next_tick:
                self.tick(run)
                next_tick += self.interval
        return run

    def tick(self, run: Run) -> None:
        stats = self.scrape()
        lim = self.limiter
        if lim is None:
            return
        lim.observe(stats)
        decision = lim.tick(queued=len(self.queue))
        engine_count = self.engine.num_running + self.engine.num_waiting
        run.ticks.append(Tick(self.now, lim.limit, lim.inflight, engine_count, decision.reason))
        run.states.append(lim.state())


def simulate(
    workload: Workload,
    algorithm: LimitAlgorithm | None,
    sla: SLA,
    *,
    duration: float,
    profile: Profile | None = None,
    scenario: Scenario = Scenario(),
    clients: int | None = None,
    interval: float = 1.0,
    min_samples: int = 20,
    seed: int = 0,
    declare: bool = True,
) -> Run:
    """Run `workload` for `duration` virtual seconds through `algorithm` (None: straight to the server);
    `declare`: whether requests say their max_tokens (the engine's default where they do not)."""
    loop = Loop(
        workload,
        algorithm,
        sla,
        profile=profile or get_profile("tiny-cpu-4l"),
        scenario=scenario,
        clients=clients,
        interval=interval,
        min_samples=min_samples,
        seed=seed,
        declare=declare,
    )
    return loop.run(duration)
