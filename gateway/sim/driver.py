"""Runs the engine model in real time on the event loop and hands tokens to the HTTP handlers.

Each iteration schedules a step, sleeps until `start + modelled_time / speed` (a deadline, so
the bookkeeping of a step does not stretch it) and completes it. Consecutive steps are chained on
the modelled timeline (the next starts at the previous deadline) unless the loop fell more than
CATCH_UP behind, so timer rounding does not accumulate into a slower engine. With nothing to do, or while hung
or dead, the loop waits on an event that `submit` and fault changes set: it never polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from gateway.sim.engine import Engine, Sequence
from gateway.sim.faults import Faults
from gateway.sim.metrics import SimMetrics
from gateway.types import Clock

CATCH_UP = 0.005
"""Seconds of wake-up lateness the step loop absorbs by starting the next step early."""


class TokenStream:
    """The tokens of one sequence as the driver produces them; one consumer."""

    __slots__ = ("_ready", "_waiter", "aborted", "ended", "seq", "taken")

    def __init__(self, seq: Sequence) -> None:
        self.seq = seq
        self.taken = 0
        self._ready = 0
        self._waiter: asyncio.Future[None] | None = None
        self.ended = False
        self.aborted = False

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def push(self) -> None:
        self._ready += 1
        self._wake()

    def end(self, aborted: bool = False) -> None:
        self.ended = True
        self.aborted = self.aborted or aborted
        self._wake()

    async def next(self, burst: int = 1) -> int:
        """How many tokens arrived since the last call (coalesced, as vLLM's output collector
        merges outputs a slow reader has not taken), waiting for at least `burst` of them unless
        the stream ends first; 0 once the stream has ended."""
        while self._ready < burst and not self.ended:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self.aborted:
            return 0
        count = self._ready
        self._ready = 0
        self.taken += count
        return count

    @property
    def finished(self) -> bool:
        return self.ended and not self.aborted and self._ready == 0


class EngineDriver:
    def __init__(self, engine: Engine, metrics: SimMetrics, clock: Clock = time.monotonic) -> None:
        self.engine = engine
        self.metrics = metrics
        self.clock = clock
        self.faults = Faults()
        self._streams: dict[int, TokenStream] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        self.abort_all()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def set_faults(self, faults: Faults) -> None:
        self.faults = faults
        if faults.die:
            self.abort_all()
        self._wake.set()

    def submit(
        self,
        prompt_len: int,
        hashes: list[int],
        *,
        max_tokens: int | None,
        ignore_eos: bool,
    ) -> TokenStream:
        seq = self.engine.add(prompt_len, hashes, self.clock(), max_tokens=max_tokens, ignore_eos=ignore_eos)
        stream = TokenStream(seq)
        self._streams[seq.uid] = stream
        self.metrics.observe_state(self.engine)
        self._wake.set()
        return stream

    def abort(self, stream: TokenStream) -> None:
        """Drop a request (client gone, server dying): its blocks are free when this returns."""
        self._streams.pop(stream.seq.uid, None)
        if self.engine.abort(stream.seq):
            self.metrics.observe_state(self.engine)
        stream.end(aborted=not stream.finished)

    def abort_all(self) -> None:
        for stream in list(self._streams.values()):
            self.abort(stream)

    async def _run(self) -> None:
        engine = self.engine
        clock = self.clock
        deadline: float | None = None
        while True:
            if self.faults.hang or self.faults.die or not engine.has_work:
                deadline = None
                self._wake.clear()
                await self._wake.wait()
                continue
            now = clock()
            # Back to back steps start where the previous one was due to end, so timer
            # granularity and wake-up jitter do not add up; a real lag is not made up.
            start = now if deadline is None else max(deadline, now - CATCH_UP)
            plan = engine.schedule(start)
            if plan.empty:
                # Cannot happen with a valid profile (a prompt always fits an empty cache);
                # wait for a change rather than spin.
                self.metrics.observe_state(engine)
                deadline = None
                self._wake.clear()
                await self._wake.wait()
                continue
            deadline = start + plan.duration / self.faults.speed
            delay = deadline - clock()
            await asyncio.sleep(delay if delay > 0 else 0)
            report = engine.complete(plan, max(deadline, clock()))
            streams = self._streams
            for seq in report.emitted:
                stream = streams.get(seq.uid)
                if stream is not None:
                    stream.push()
            for seq in report.finished:
                done = streams.pop(seq.uid, None)
                if done is not None:
                    done.end()
            self.metrics.record(report, engine)
