"""A closed loop of N clients against the engine model in virtual time (no sleeping, no I/O).

Each client sends a request, waits for its last token, and sends the next one `think` seconds
later; a request reaches the engine `overhead` (the front end's) after it is sent. The loop
advances a virtual clock by each step's modelled time, and over an idle engine straight to the
next request, so an 18-second run takes a fraction of a second.

`VirtualClients` is the loop itself; a caller may put a gate in front of the engine (the limit
benchmark puts a real `Limiter` there), in which case a request reaches the engine when the gate
lets it through, between steps, rather than when it was ready. `run_closed_loop` is the ungated
loop with the profile's front-end overhead, used to calibrate profiles against a real engine and
by tests of whole-system behaviour (knees, preemption counts).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gateway.control.window import nearest_rank
from gateway.sim.engine import Engine, Sequence, StepReport
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
    return nearest_rank(sorted(values), q / 100) or 0.0


class VirtualClients:
    """`clients` closed-loop clients of one engine, on a virtual clock (`now`)."""

    def __init__(
        self,
        engine: Engine,
        clients: int,
        *,
        prompt_len: int,
        max_tokens: int,
        think: float = 0.0,
        overhead: float = 0.0,
        shared_prompt: bool = False,
        ignore_eos: bool = True,
    ) -> None:
        self.engine = engine
        self.now = 0.0
        # Times at which requests reach the engine's door, oldest first: `overhead` (the front
        # end) after a client sends, and a client sends `think` after its last request ended;
        # requests end in time order, so appending keeps it sorted.
        self.ready: deque[float] = deque(overhead for _ in range(clients))
        self.peak_waiting = self.peak_running = 0
        self._think, self._overhead = think, overhead
        self._prompt_len, self._max_tokens, self._ignore_eos = prompt_len, max_tokens, ignore_eos
        self._blocks = prompt_len // engine.profile.block_size
        self._shared = [hash(("shared", j)) for j in range(self._blocks)] if shared_prompt else None
        self._requests = 0

    def clock(self) -> float:
        return self.now

    def queued(self) -> int:
        """Clients ready to send that have not been let through."""
        return sum(1 for t in self.ready if t <= self.now)

    def send(self, admit: Callable[[], bool] | None = None) -> Iterator[Sequence]:
        """Hand ready clients' requests to the engine one by one while `admit()` allows (no gate:
        all of them); `admit` is asked again after the caller has handled each one."""
        while self.ready and self.ready[0] <= self.now and (admit is None or admit()):
            at = self.ready.popleft()
            self._requests += 1
            hashes = self._shared or [hash((self._requests, j)) for j in range(self._blocks)]
            arrival = at if admit is None else self.now
            yield self.engine.add(
                self._prompt_len, hashes, arrival, max_tokens=self._max_tokens, ignore_eos=self._ignore_eos
            )

    def step(self, idle_until: float) -> StepReport | None:
        """One engine step from `now`; over an idle engine, jump to the next ready client or to
        `idle_until`, whichever comes first, and return None. Finished clients queue to send again."""
        plan = self.engine.schedule(self.now)
        self.peak_waiting = max(self.peak_waiting, self.engine.num_waiting)
        self.peak_running = max(self.peak_running, self.engine.num_running)
        if plan.empty:
            self.now = max(min(idle_until, self.ready[0] if self.ready else idle_until), plan.started_at)
            return None
        self.now += plan.duration
        report = self.engine.complete(plan, self.now)
        self.ready.extend(self.now + self._think + self._overhead for _ in report.finished)
        return report


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
    loop = VirtualClients(
        Engine(profile, random.Random(seed)),
        clients,
        prompt_len=prompt_len,
        max_tokens=max_tokens,
        think=client_gap,
        overhead=profile.frontend_overhead,
        shared_prompt=shared_prompt,
        ignore_eos=ignore_eos,
    )
    tokens = finished = 0
    ttfts: list[float] = []
    itls: list[float] = []
    e2es: list[float] = []
    while loop.now < duration:
        list(loop.send())
        report = loop.step(idle_until=duration)
        if report is None:
            continue
        if loop.now > duration:
            break
        tokens += report.generation_tokens
        ttfts.extend(t + profile.frontend_overhead for t in report.ttfts)
        itls.extend(report.itls)
        finished += len(report.finished)
        e2es.extend(loop.now - seq.arrival + profile.frontend_overhead for seq in report.finished)
    return LoopResult(
        clients=clients,
        duration=duration,
        tokens=tokens,
        finished=finished,
        ttft_p90=percentile(ttfts, 90),
        itl_p90=percentile(itls, 90),
        e2e_p50=percentile(e2es, 50),
        e2e_p90=percentile(e2es, 90),
        preemptions=loop.engine.preemptions_total,
        peak_waiting=loop.peak_waiting,
        peak_running=loop.peak_running,
    )
