"""The gateway's background loops, each supervised (gateway.supervise), started and stopped together.

Per backend, two loops:
- health checks (gateway.monitor) every `health.interval`; one round runs for every backend before
  the gateway serves, so models are known and healthy backends are in rotation from the first request;
- the control loop: every `controller.interval` the limiter ticks with the demand queued for the
  backend's models (batch lines included), then the backend's queues are woken, since batch lines
  may wait on a reserve that only time shrinks; every limit change is counted and logged.
Both read the intervals from the current config at each turn, so a reload applies to the next one.
Process-wide: the event-loop lag watch, and the coordination loop when state is shared through Redis.
A backend added by a reload gets its loops (its first check at once); a removed one loses them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Protocol

from gateway.backends import Backend, Pool
from gateway.config import GatewayConfig
from gateway.looplag import watch_loop_lag
from gateway.metrics import Metrics
from gateway.model_queues import ModelQueues
from gateway.monitor import BackendMonitor, stop_tasks
from gateway.supervise import supervise
from gateway.types import Clock, Direction
from gateway.upstream import Upstream

log = logging.getLogger("gateway")


class Coordination(Protocol):
    async def run(self) -> None: ...


class Host(Protocol):
    """What the loops read from the running gateway (gateway.app.Gateway)."""

    @property
    def config(self) -> GatewayConfig: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def pool(self) -> Pool: ...
    @property
    def queues(self) -> ModelQueues: ...
    @property
    def upstream(self) -> Upstream: ...
    @property
    def coordinator(self) -> Coordination | None: ...


class Loops:
    def __init__(self, host: Host) -> None:
        self._host = host
        self._started = False
        self._tasks: list[asyncio.Task[None]] = []
        self._per_backend: dict[Backend, list[asyncio.Task[None]]] = {}

    async def start(self) -> None:
        h = self._host
        monitors = [self._monitor(b) for b in h.pool.backends]
        await asyncio.gather(*(m.check_once() for m in monitors))
        self._started = True
        for m in monitors:
            self._watch(m, check_first=False)
        lag = partial(watch_loop_lag, h.metrics.requests.loop_lag.observe)
        self._tasks.append(self._supervised("event-loop lag watch", lag))
        if h.coordinator is not None:
            self._tasks.append(self._supervised("coordination", h.coordinator.run))

    async def stop(self) -> None:
        await stop_tasks([*self._tasks, *(t for ts in self._per_backend.values() for t in ts)])
        self._tasks.clear()
        self._per_backend.clear()

    def watch(self, backend: Backend) -> None:
        """Start the loops of a backend added by a reload (nothing before start: start does it)."""
        if self._started:
            self._watch(self._monitor(backend), check_first=True)

    def unwatch(self, backend: Backend) -> None:
        """Stop them for a backend a reload removed (its running requests finish regardless)."""
        for task in self._per_backend.pop(backend, []):
            task.cancel()

    def _monitor(self, backend: Backend) -> BackendMonitor:
        h = self._host
        timeout = max(1.0, min(5.0, h.config.health.interval * 2))
        return BackendMonitor(
            backend, h.upstream.session, clock=h.clock, timeout=timeout, on_available=h.queues.wake
        )

    def _watch(self, monitor: BackendMonitor, *, check_first: bool) -> None:
        name = monitor.backend.name
        self._per_backend[monitor.backend] = [
            self._supervised(f"health checks of {name}", partial(self._health_loop, monitor, check_first)),
            self._supervised(f"control loop of {name}", partial(self._control_loop, monitor.backend)),
        ]

    def _supervised(self, what: str, loop: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """A background loop that is logged and started again if it raises (gateway.supervise)."""
        return asyncio.create_task(supervise(what, loop, clock=self._host.clock))

    async def _health_loop(self, monitor: BackendMonitor, check_first: bool) -> None:
        if check_first:
            await monitor.check_once()
        while True:
            await asyncio.sleep(self._host.config.health.interval)
            await monitor.check_once()

    async def _control_loop(self, backend: Backend) -> None:
        h = self._host
        while True:
            await asyncio.sleep(h.config.controller.interval)
            decision = backend.limiter.tick(h.queues.queued_for(backend))
            h.queues.wake(backend)
            if decision.direction is Direction.HOLD:
                continue
            h.metrics.controller.adjustments.labels(
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
