"""The backend pool: which backends serve a model and are in rotation, and which one gets a slot.

Choice is late: `pick` runs when a request is about to be dispatched (or, at late binding, when a
slot frees for the waiters allowed to go next) and asks the routing strategy (gateway.routing) which
backend with room takes which request; the chosen backend gives it a `Lease`
(gateway.pool.backends), whose release hands the freed room to `hand_off`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

from gateway.pool.backends import Backend, Lease
from gateway.routing import Load, RouteKey, Strategy
from gateway.routing.strategies import LeastLoaded
from gateway.types import Clock, Signal


def _nobody_waits(backend: Backend) -> None:
    """The hand-off of a pool that no queue takes slots from."""


class Pool:
    def __init__(self, backends: Iterable[Backend], clock: Clock, strategy: Strategy | None = None) -> None:
        self.backends = tuple(backends)
        self.strategy: Strategy = strategy or LeastLoaded()
        self.hand_off: Callable[[Backend], None] = _nobody_waits
        """Where a slot freed on a backend goes: the waiters for its models (set by the admission
        queues). Called by `Lease.release` while the backend has room."""
        self._clock = clock

    def pick(
        self,
        model: str,
        routes: Sequence[RouteKey | None],
        *,
        exclude: Collection[str] = (),
        background: bool = False,
    ) -> tuple[int, Lease] | None:
        """Which of `routes` (the requests allowed to go next) takes a slot now, and its lease, on
        no backend named in `exclude`; a batch line (`background`) only where
        `Backend.background_room` leaves it one."""
        now = self._clock()
        serving: list[Backend] = []
        loads: list[Load] = []
        any_open = False
        for b in self.backends:
            if model not in b.models or not b.in_rotation(now):
                continue
            lim = b.limiter
            is_open = b.room(now, background=background) > 0 and b.name not in exclude
            any_open = any_open or is_open
            s = b.engine_stats
            loads.append(
                Load(
                    b.name,
                    lim.inflight,
                    lim.limit,
                    is_open,
                    None if s is None else s.kv_usage,
                    None if s is None else s.kv_capacity_tokens,
                    b.cache_epoch,
                )
            )
            serving.append(b)
        if not any_open:
            return None
        choice = self.strategy.choose(model, routes, loads)
        if choice is None:
            return None
        target = serving[choice.backend]
        route = routes[choice.request]
        lease = target.lease(
            background=background, hand_off=self.hand_off, sequences=1 if route is None else route.sequences
        )
        self.strategy.routed(model, routes[choice.request], loads[choice.backend], choice)
        return choice.request, lease

    def available(self, model: str, *, exclude: Collection[str] = ()) -> bool:
        """Some backend in rotation, none named in `exclude`, serves `model`."""
        now = self._clock()
        return any(model in b.models and b.in_rotation(now) and b.name not in exclude for b in self.backends)

    def has_room(self, model: str, *, background: bool = False) -> bool:
        """Some backend in rotation serving `model` has a free slot (for a batch line: one that
        `Backend.background_room` leaves it; with shared slots, a lease ready for it)."""
        now = self._clock()
        return any(
            model in b.models and b.in_rotation(now) and b.room(now, background=background) > 0
            for b in self.backends
        )

    def capacity(self, model: str) -> int:
        """Slots the backends in rotation serving `model` allow now: the sum of their limits."""
        now = self._clock()
        return sum(b.limiter.limit for b in self.backends if model in b.models and b.in_rotation(now))

    def engine_p90(self, model: str) -> dict[Signal, float]:
        """Per signal, the worst engine-side P90 among the backends in rotation serving `model`:
        what the engine may add to a request's wait, wherever it is sent."""
        now = self._clock()
        worst: dict[Signal, float] = {}
        for b in self.backends:
            if model in b.models and b.in_rotation(now):
                for signal, value in b.limiter.engine_p90.items():
                    worst[signal] = max(value, worst.get(signal, value))
        return worst

    def known(self, model: str) -> bool:
        return any(model in b.models for b in self.backends)

    def undiscovered(self) -> list[Backend]:
        """Backends whose models are not known yet (never reached, nothing pinned)."""
        return [b for b in self.backends if not b.models]

    def models(self) -> list[str]:
        now = self._clock()
        return sorted({m for b in self.backends if b.in_rotation(now) for m in b.models})

    def all_busy(self, model: str) -> bool:
        """True when no backend in rotation serving `model` has a free slot."""
        now = self._clock()
        return not any(model in b.models and b.in_rotation(now) and not b.full() for b in self.backends)

    def last_in_rotation(self, backend: Backend) -> bool:
        """True when `backend` is the only one in rotation serving some model it serves."""
        now = self._clock()
        others = [b for b in self.backends if b is not backend and b.in_rotation(now)]
        return any(not any(model in b.models for b in others) for model in backend.models)
