"""A closed loop of N clients against the engine model in virtual time (no sleeping, no I/O).

Each client sends a request, waits for its last token, and sends the next one after `client_gap`
seconds plus the profile's front-end overhead. The loop advances a virtual clock by each step's
modelled time, so an 18-second run takes a fraction of a second. Used to calibrate profiles against
measurements of a real engine and by tests of whole-system behaviour (knees, preemption counts).
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

from gateway.sim.engine import Engine
from gateway.sim.profiles import Profile


@dataclass(frozen=True, slots=True)
class LoopResult:
    clients: int
    duration: float
    tokens: int
    finished: int
    ttft_p90: float
    itl_p90: float
    e2e_p50: float
    e2e_p90: float
    preemptions: int
    peak_waiting: int
    peak_running: int

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.duration

    @property
    def req_per_s(self) -> float:
        return self.finished / self.duration


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in 0..100; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


def run_closed_loop(
    profile: Profile,
    clients: int,
    *,
    prompt_len: int,
    max_tokens: int,
    duration: float,
    shared_prompt: bool = False,
    ignore_eos: bool = True,
    client_gap: float = 0.001,
    seed: int = 0,
) -> LoopResult:
    engine = Engine(profile, random.Random(seed))
    full = prompt_len // profile.block_size
    shared = [hash(("shared", j)) for j in range(full)]
    arrivals: list[tuple[float, int]] = [(profile.frontend_overhead, c) for c in range(clients)]
    heapq.heapify(arrivals)
    now = 0.0
    request_no = 0
    tokens = finished = peak_waiting = peak_running = 0
    ttfts: list[float] = []
    itls: list[float] = []
    e2es: list[float] = []
    while now < duration:
        while arrivals and arrivals[0][0] <= now:
            at, _client = heapq.heappop(arrivals)
            request_no += 1
            hashes = shared if shared_prompt else [hash((request_no, j)) for j in range(full)]
            engine.add(prompt_len, hashes, at, max_tokens=max_tokens, ignore_eos=ignore_eos)
        plan = engine.schedule(now)
        peak_waiting = max(peak_waiting, engine.num_waiting)
        peak_running = max(peak_running, engine.num_running)
        if plan.empty:
            if not arrivals:
                break
            now = arrivals[0][0]
            continue
        now += plan.duration
        report = engine.complete(plan, now)
        if now > duration:
            break
        tokens += report.generation_tokens
        ttfts.extend(t + profile.frontend_overhead for t in report.ttfts)
        itls.extend(report.itls)
        for seq in report.finished:
            finished += 1
            e2es.append(now - seq.arrival + profile.frontend_overhead)
            heapq.heappush(arrivals, (now + client_gap + profile.frontend_overhead, 0))
    return LoopResult(
        clients=clients,
        duration=duration,
        tokens=tokens,
        finished=finished,
        ttft_p90=percentile(ttfts, 90),
        itl_p90=percentile(itls, 90),
        e2e_p50=percentile(e2es, 50),
        e2e_p90=percentile(e2es, 90),
        preemptions=engine.preemptions_total,
        peak_waiting=peak_waiting,
        peak_running=peak_running,
    )
