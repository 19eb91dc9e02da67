"""Admission through shared slots: the pool's backends take their slots from Redis (state.redis_url).

Wiring only; the parts live in gateway.coordination. For each backend a `SlotPump` asks Redis for a
lease whenever a request waits here for it, for the tenant the queue would serve next, and the
queue dispatches synchronously into it (`Backend.room`, `Backend.lease`): so a backend's in-flight
count is the set of its leases in Redis, across every process and replica, and a request that
ends gives its lease back through the pump. A `ReleaseListener` wakes the pumps when another
process frees a slot. The coordinator (renewals, elections, fallback) runs beside them.

One controller per backend, the leader's (`tick`, every control interval in every process):
- the leader reads what the others reported (gateway.coordination.samples: their finished
  requests, their queues), feeds it to its limiter, ticks it with the shared in-flight count and
  every process's waiting requests, and publishes the limit, the ceiling and the engine's stats;
- the others report, read the shared state and adopt the published limit and engine stats; they do not
  scrape the backend's /metrics (`scrapes`), so the engine's counters are read once, not N times;
- in fallback nobody ticks: the slots admit a local share of the last limit seen, and each
  process scrapes for itself again (the stats come from nowhere else).

Without a Redis none of this is built and the pool counts slots in this process only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Mapping

from gateway.admission.model_queues import ModelQueues
from gateway.coordination.coordinator import FAILURES, Coordinator
from gateway.coordination.pump import SlotPump
from gateway.coordination.samples import SampleStream
from gateway.coordination.wakeups import ReleaseListener
from gateway.pool.backends import Backend
from gateway.pool.pool import Pool
from gateway.types import Clock, Decision, Sample

POLL_SECONDS = 0.5
"""How often a pump asks again while requests wait, if no release woke it first."""

PENDING_SAMPLES = 2000
"""Samples kept for the leader while they cannot be sent (in fallback the oldest are dropped)."""


class _BackendDemand:
    """What waits for one backend in this process: the queues of the models it serves."""

    def __init__(self, backend: Backend, queues: ModelQueues) -> None:
        self._backend = backend
        self._queues = queues

    def next_tenant(self) -> str | None:
        background = None
        for model, q in self._queues.by_model.items():
            if model not in self._backend.models:
                continue
            if q.depth:
                return q.next_tenant()
            if background is None and q.background.depth:
                background = q.background.next_tenant()
        return background

    def room(self) -> int:
        lim = self._backend.limiter
        return lim.limit - lim.inflight

    def hand_out(self) -> None:
        self._queues.wake(self._backend)


class SharedAdmission:
    def __init__(
        self,
        coordinator: Coordinator,
        pool: Pool,
        queues: ModelQueues,
        weights: Mapping[str, float],
        *,
        clock: Clock,
        report_age: float = 3.0,
        poll: float = POLL_SECONDS,
    ) -> None:
        self.coordinator = coordinator
        self._clock = clock
        self._report_age = report_age
        self._stream = SampleStream(coordinator.redis, keys=coordinator.keys, clock=clock)
        self._pending: dict[str, deque[Sample]] = {}
        self._queued: dict[str, dict[str, tuple[int, float]]] = {}
        """Per backend, each other process's last reported waiting requests, and when."""
        self._queues = queues
        self._weights = dict(weights)
        self._poll = poll
        self.pumps: dict[str, SlotPump] = {}
        for backend in pool.backends:
            self.attach(backend)
        self.listener = ReleaseListener(
            coordinator.redis, coordinator.backends, self._wake, keys=coordinator.keys
        )

    def attach(self, backend: Backend) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """Make `backend` take its slots from Redis (at start, and when a reload adds it: other
        processes' releases are then heard through the poll, the subscription being made at
        start). Returns the backend's loops to run."""
        self.coordinator.add(backend.name)
        pump = SlotPump(
            backend.name,
            self.coordinator.slots,
            _BackendDemand(backend, self._queues),
            limit=lambda: backend.limiter.limit,
            weight=self._weight,
            poll=self._poll,
        )
        backend.pump = pump
        self.pumps[backend.name] = pump
        pending: deque[Sample] = deque(maxlen=PENDING_SAMPLES)
        self._pending[backend.name] = pending
        backend.limiter.on_sample = pending.append
        return [
            (f"shared slots of {backend.name}", pump.run),
            (f"shared releases of {backend.name}", pump.run_releases),
        ]

    def scrapes(self, backend: Backend) -> bool:
        """Whether this process reads the backend's /metrics: its leader does, or each in fallback."""
        c = self.coordinator
        return not c.fallback.shared or backend.name in c.terms

    async def tick(self, backend: Backend, queued: int) -> Decision | None:
        """The control tick of `backend` with shared state; the decision when this process leads."""
        c = self.coordinator
        if not c.fallback.shared:
            return None
        try:
            if backend.name in c.terms:
                return await self._lead(backend, queued)
            await self._follow(backend, queued)
        except FAILURES as exc:
            c.slots.lost(exc)
        return None

    async def _lead(self, backend: Backend, queued: int) -> Decision | None:
        c, lim, name = self.coordinator, backend.limiter, backend.name
        self._pending[name].clear()  # the leader's own samples are in its limiter already
        now = self._clock()
        others = self._queued.setdefault(name, {})
        for report in await self._stream.read(name):
            if report.owner == c.owner:
                continue
            for sample in report.samples:
                lim.record(sample)
            others[report.owner] = (report.queued, now)
        waiting = queued + sum(n for n, at in others.values() if now - at <= self._report_age)
        view = await c.read(name)
        if view is None or name not in c.terms:
            return None
        decision = lim.tick(waiting, shared_inflight=view.inflight)
        await c.publish(name, lim.limit, lim.ceiling, backend.engine_stats)
        return decision

    async def _follow(self, backend: Backend, queued: int) -> None:
        c, lim, name = self.coordinator, backend.limiter, backend.name
        self._stream.forget(name)
        self._queued.pop(name, None)
        pending = self._pending[name]
        samples = list(pending)
        await self._stream.append(name, c.owner, samples, queued, lim.inflight)
        for _ in samples:
            pending.popleft()
        view = await c.read(name)
        if view is None:
            return
        if view.limit is not None:
            lim.adopt(view.limit)
        if view.engine_stats is not None and view.engine_stats is not backend.engine_stats:
            backend.engine_stats = view.engine_stats
            lim.observe(view.engine_stats)

    def _weight(self, tenant: str) -> float:
        return self._weights.get(tenant, 1.0)

    def _wake(self, backend: str) -> None:
        pump = self.pumps.get(backend)
        if pump is not None:
            pump.nudge()

    async def start(self) -> None:
        """Reach Redis once before serving: until a first renewal gets through, a process cannot
        know how many others share the backends and would admit each whole limit by itself. If
        Redis does not answer (within `state.timeout`) it serves in fallback and says so."""
        await self.coordinator.step()

    def loops(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """The background loops to run (and supervise) while the gateway serves."""
        out: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("coordination", self.coordinator.run),
            ("release announcements", self.listener.run),
        ]
        for pump in self.pumps.values():
            out.append((f"shared slots of {pump.backend}", pump.run))
            out.append((f"shared releases of {pump.backend}", pump.run_releases))
        return out

    async def close(self) -> None:
        """Give back what ended (the loops are stopped), then leave: resign, close the client."""
        for pump in self.pumps.values():
            await pump.flush()
        await self.coordinator.close()

    def state(self) -> dict[str, object]:
        out = self.coordinator.state()
        out["pumps"] = {name: pump.state() for name, pump in self.pumps.items()}
        out["announcements_heard"] = self.listener.heard
        return out
