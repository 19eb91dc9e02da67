"""The gateway's background loops, each supervised (gateway.runtime.supervise), started and stopped together.

Per backend, two loops:
- health checks (gateway.pool.monitor) every `health.interval`; one round runs for every backend before
  the gateway serves, so models are known and healthy backends are in rotation from the first request;
- the control loop: every `controller.interval` the limiter ticks with the demand queued for the
  backend's models (batch lines included), then the backend's queues are woken, since batch lines
  may wait on a reserve that only time shrinks; every limit change is counted and logged.
Both read the intervals from the current config at each turn, so a reload applies to the next one.
Process-wide: the event-loop lag watch, and when state is shared through Redis (gateway.runtime.sharing)
its loops: coordination, release announcements, and per backend the slot pump and its releases.
With shared state the control tick is the sharing's: the backend's leader ticks the limiter and
publishes, the others adopt; and only the leader scrapes the engine's /metrics.
A backend added by a reload gets its loops (its first check at once); a removed one loses them,
except its shared-slot loops, which its running requests still give their leases back through.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Protocol

from gateway.admission.model_queues import ModelQueues
from gateway.config import GatewayConfig
from gateway.metrics import Metrics
from gateway.pool.backends import Backend
from gateway.pool.monitor import BackendMonitor
from gateway.pool.pool import Pool
from gateway.proxy.upstream import Upstream
from gateway.runtime.looplag import watch_loop_lag
from gateway.runtime.supervise import supervise
from gateway.runtime.tasks import stop_tasks
from gateway.types import Clock, Decision, Direction

log = logging.getLogger("gateway")


Loop = tuple[str, Callable[[], Awaitable[None]]]
"""A background loop and what to call it in the logs."""


class Sharing(Protocol):
    async def start(self) -> None: ...

    def loops(self) -> list[Loop]: ...

    def attach(self, backend: Backend) -> list[Loop]: ...

    def scrapes(self, backend: Backend) -> bool: ...

    async def tick(self, backend: Backend, queued: int) -> Decision | None: ...


class Loops:
    def __init__(
        self,
        pool: Pool,
        queues: ModelQueues,
        upstream: Upstream,
        metrics: Metrics,
        *,
        config: Callable[[], GatewayConfig],
        clock: Clock,
        sharing: Sharing | None,
    ) -> None:
        """`config()` is the config in force, read at each turn of a loop."""
        self._pool = pool
        self._queues = queues
        self._upstream = upstream
        self._metrics = metrics
        self._config = config
        self._clock = clock
        self._sharing = sharing
        self._started = False
        self._tasks: list[asyncio.Task[None]] = []
        self._per_backend: dict[Backend, list[asyncio.Task[None]]] = {}
        self._retiring: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        monitors = [self._monitor(b) for b in self._pool.backends]
        await asyncio.gather(*(m.check_once() for m in monitors))
        self._started = True
        for m in monitors:
            self._watch(m, check_first=False)
        if self._sharing is not None:
            await self._sharing.start()
        lag = partial(watch_loop_lag, self._metrics.requests.loop_lag.observe)
        self._tasks.append(self._supervised("event-loop lag watch", lag))
        if self._sharing is not None:
            self._tasks += [self._supervised(what, loop) for what, loop in self._sharing.loops()]

    async def stop(self) -> None:
        per_backend = (t for ts in self._per_backend.values() for t in ts)
        await stop_tasks([*self._retiring, *self._tasks, *per_backend])
        self._tasks.clear()
        self._per_backend.clear()

    def watch(self, backend: Backend) -> None:
        """Start the loops of a backend added by a reload (nothing before start: start does it)."""
        shared = self._sharing.attach(backend) if self._sharing is not None else []
        if self._started:
            self._watch(self._monitor(backend), check_first=True)
            self._tasks += [self._supervised(what, loop) for what, loop in shared]

    def unwatch(self, backend: Backend) -> None:
        """Stop them for a backend a reload removed (its running requests finish regardless)."""
        loops = self._per_backend.pop(backend, [])
        if not loops:
            return
        for task in [*loops, asyncio.create_task(stop_tasks(loops))]:
            self._retiring.add(task)  # until it ends; stop() stops those still running
            task.add_done_callback(self._retiring.discard)

    def _monitor(self, backend: Backend) -> BackendMonitor:
        timeout = max(1.0, min(5.0, self._config().health.interval * 2))
        return BackendMonitor(
            backend,
            self._upstream.session,
            clock=self._clock,
            timeout=timeout,
            on_available=self._queues.wake,
            last_in_rotation=self._queues.pool.last_in_rotation,
            scrapes=None if self._sharing is None else self._sharing.scrapes,
        )

    def _watch(self, monitor: BackendMonitor, *, check_first: bool) -> None:
        name = monitor.backend.name
        self._per_backend[monitor.backend] = [
            self._supervised(f"health checks of {name}", partial(self._health_loop, monitor, check_first)),
            self._supervised(f"control loop of {name}", partial(self._control_loop, monitor.backend)),
        ]

    def _supervised(self, what: str, loop: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """A background loop that is logged and started again if it raises (gateway.runtime.supervise)."""
        return asyncio.create_task(supervise(what, loop, clock=self._clock))

    async def _health_loop(self, monitor: BackendMonitor, check_first: bool) -> None:
        if check_first:
            await monitor.check_once()
        while True:
            await asyncio.sleep(self._config().health.interval)
            await monitor.check_once()

    async def _control_loop(self, backend: Backend) -> None:
        while True:
            await asyncio.sleep(self._config().controller.interval)
            backend.follow_sla(self._config())  # its models may have been discovered since
            queued = self._queues.queued_for(backend)
            if self._sharing is None:
                decision: Decision | None = backend.limiter.tick(queued)
            else:  # one controller per backend across processes
                decision = await self._sharing.tick(backend, queued)
            self._queues.wake(backend)
            if decision is None or decision.direction is Direction.HOLD:
                continue
            self._metrics.controller.adjustments.labels(
                backend.name, decision.direction.value, decision.reason
            ).inc()
            log.info(
                "%s limit %s to %d (%s): %s",
                backend.name,
                decision.direction.value,
                decision.limit,
                decision.reason,
                decision.detail,
            )
