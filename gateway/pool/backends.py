"""One backend: whether it is in rotation, the room it has, and the lease a request holds on it.

A backend leaves rotation when its health check fails or after `failure_threshold` consecutive failed
requests (passive ejection); it returns after an exponential backoff once a health check passes.
Every ejection is logged with its cause. A backend that answers, even with a 5xx, an error in the
stream or a stream that stops, is not ejected for it while it is the last in rotation for one of its
models: its answers still reach the clients, while without it every request would get 503
`no_backend` (at 50% errors, a quarter of the requests did). Failing to connect, or to answer before
the first-byte timeout, ejects it regardless, and so do failed health checks, except one that got
no answer in time from a backend that is busy rather than down (gateway.pool.monitor). A backend's
cache epoch moves when it is ejected or seen to restart, which tells the prefix index that its
cache is gone.

Batch lines take only the room the interactive reserve leaves them (gateway.pool.reserve).

The hand-off: a request's `Lease` is its one hold on a backend, and `Lease.release` is the one
place a freed slot goes to the next waiter: it gives back the limiter's slot (and the shared one),
then calls the pool's `hand_off` (gateway.pool.pool), which the admission queues set
(gateway.admission.model_queues), and which may dispatch the next request in that same call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gateway.config import BackendConfig, GatewayConfig, HealthConfig
from gateway.control import algorithms
from gateway.control.limiter import Limiter
from gateway.control.slots import Slot
from gateway.coordination.pump import SlotPump
from gateway.coordination.shared_slots import SharedSlot
from gateway.pool.reserve import InteractiveReserve
from gateway.types import Clock, EngineStats, Sample

log = logging.getLogger("gateway.pool.backends")


class Backend:
    def __init__(
        self,
        config: BackendConfig,
        limiter: Limiter,
        health: HealthConfig,
        clock: Clock,
        *,
        interactive_horizon: float = 30.0,
    ) -> None:
        self.config = config
        self.name = config.name
        self.url = config.url
        self.limiter = limiter
        self.models: frozenset[str] = frozenset(config.models)
        self.healthy = False
        self.engine_stats: EngineStats | None = None
        self.ejected_until = 0.0
        self.ejections = 0
        self.consecutive_failures = 0
        self.last_error = ""
        self.cache_epoch = 0
        """Bumped whenever the backend may have lost its prefix cache (ejected, restarted)."""
        self.prefix_queries = 0.0
        self.prefix_hits = 0.0
        """vLLM's prefix-cache counters (tokens) accumulated since the gateway started watching."""
        self.background_inflight = 0
        self.pump: SlotPump | None = None
        """With shared state (state.redis_url): where this backend's slots come from, a lease in
        Redis per request; the pool offers the backend only while the pump has one ready."""
        self._reserve = InteractiveReserve(interactive_horizon)
        self._health = health
        self._clock = clock

    def reconfigure(self, config: BackendConfig, health: HealthConfig) -> None:
        """A reloaded config for the same backend (name and URL): its learned state stays."""
        if config.models != self.config.models:
            self.models = frozenset(config.models)  # empty: discovered again at the next check
        self.config = config
        self._health = health

    def in_rotation(self, now: float) -> bool:
        return self.healthy and now >= self.ejected_until

    def background_room(self, now: float) -> int:
        """Slots a batch line may take (`InteractiveReserve.background_room`)."""
        return self._reserve.background_room(now, self.limiter, self.background_inflight)

    def room(self, now: float, *, background: bool) -> int:
        """Slots a request may take now: the limiter's room (a batch line's, see
        `background_room`), and with shared slots no more than the leases ready for it."""
        lim = self.limiter
        room = self.background_room(now) if background else lim.limit - lim.inflight
        pump = self.pump
        if pump is None or room <= 0:
            return room
        if not pump.ready:
            pump.nudge()  # a request wants a slot here: the pump asks Redis for one
        return min(room, len(pump.ready))

    def full(self) -> bool:
        """No request can be admitted now: the limit is held here or, with shared slots, across
        every process (Redis refused the last lease asked for)."""
        return not self.limiter.has_room() or (self.pump is not None and self.pump.full)

    def lease(self, *, background: bool, hand_off: Callable[[Backend], None], sequences: int = 1) -> Lease:
        """A slot for one request of `sequences` sequences (with shared slots, a lease in Redis
        counting as many, capped at the limit as the local count is)."""
        slot = self.limiter.acquire(sequences)
        shared = None
        if self.pump is not None:
            shared = self.pump.take(slot.weight)
            if shared is None:
                slot.release(None)
                raise RuntimeError(f"no shared slot ready on {self.name}")
        lease = Lease(self, slot, hand_off, background, shared)
        if background:
            self.background_inflight += slot.weight
        else:
            self._reserve.admitted(self.limiter.inflight - self.background_inflight)
        return lease

    def follow_sla(self, config: GatewayConfig) -> bool:
        """Control the limit to the engine-side targets of the models served now (they change when
        models are discovered): a new algorithm, from the limit learned so far, if they changed."""
        sla = config.engine_sla(self.models)
        lim = self.limiter
        if sla == lim.sla:
            return False
        algorithm = algorithms.create(config.controller.algorithm, config.controller.params, sla)
        lim.reconfigure(algorithm, floor=lim.floor, max_limit=self.config.max_concurrency, sla=sla)
        return True

    def record_success(self) -> None:
        self.consecutive_failures = 0
        self.ejections = 0

    def record_failure(self, error: str, *, may_eject: bool = True) -> bool:
        """Count a failed request or check; returns True when this failure ejected the backend.

        Failures of a backend already out of rotation (its in-flight streams breaking as it dies)
        are not new evidence: counting them would eject it again and double its backoff each time.
        With `may_eject` False the failure is counted but the backend stays (see the module doc).
        """
        self.last_error = error
        if not self.in_rotation(self._clock()):
            return False
        self.consecutive_failures += 1
        if self.consecutive_failures < self._health.failure_threshold or not may_eject:
            return False
        backoff = min(self._health.backoff_max, self._health.backoff_initial * 2.0 ** min(self.ejections, 16))
        log.warning(
            "backend %s out of rotation for %.1f s after %d consecutive failures; last: %s",
            self.name,
            backoff,
            self.consecutive_failures,
            error,
        )
        self.ejections += 1
        self.ejected_until = self._clock() + backoff
        self.healthy = False
        self.consecutive_failures = 0
        self.cache_epoch += 1
        return True

    def observe_prefix_cache(self, queries: float, hits: float, *, restarted: bool) -> None:
        """Add the prefix-cache counters' growth since the previous scrape; a restart empties the cache."""
        self.prefix_queries += queries
        self.prefix_hits += hits
        if restarted:
            self.cache_epoch += 1

    def mark_healthy(self) -> bool:
        """A health check passed; returns True when the backend just came (back) into rotation."""
        came_back = not self.healthy
        self.healthy = True
        return came_back

    def state(self, now: float) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "url": self.url,
            "healthy": self.healthy,
            "in_rotation": self.in_rotation(now),
            "models": sorted(self.models),
            "consecutive_failures": self.consecutive_failures,
            "ejected_for_seconds": max(0.0, round(self.ejected_until - now, 3)),
            "last_error": self.last_error,
        }
        out.update(self.limiter.state())
        out["background_inflight"] = self.background_inflight
        out["background_room"] = max(0, self.background_room(now))
        return out


def build_backend(bc: BackendConfig, config: GatewayConfig, clock: Clock) -> Backend:
    """A backend and its limiter as `config` sets them up."""
    controller = config.controller
    sla = config.engine_sla(bc.models)
    limiter = Limiter(
        algorithms.create(controller.algorithm, controller.params, sla),
        clock=clock,
        floor=bc.min_concurrency,
        max_limit=bc.max_concurrency,
        window_seconds=controller.window_seconds,
        min_samples=controller.min_samples,
        sla=sla,
    )
    return Backend(bc, limiter, config.health, clock, interactive_horizon=config.batch.interactive_horizon)


class Lease:
    """One dispatched request's hold on a backend slot. Released exactly once."""

    __slots__ = ("_hand_off", "backend", "background", "shared", "slot", "target")

    def __init__(
        self,
        target: Backend,
        slot: Slot,
        hand_off: Callable[[Backend], None],
        background: bool = False,
        shared: SharedSlot | None = None,
    ) -> None:
        self.target = target
        self.slot = slot
        self._hand_off = hand_off
        self.backend = target.name
        self.background = background
        self.shared = shared
        """The slot's lease in Redis, with shared state; released with the slot."""

    def release(self, sample: Sample | None) -> None:
        """Give the slot back, recording `sample` if the request finished well, then hand the room
        to the next waiter (the pool's `hand_off`), in this call."""
        shared, self.shared = self.shared, None  # given back once, even if called twice (a bug)
        if self.background:
            self.target.background_inflight -= self.slot.weight
        try:
            self.slot.release(sample)
        finally:  # the count went down even if recording the sample failed: the room is real
            pump = self.target.pump
            if shared is not None and pump is not None:
                pump.give_back(shared)
            if self.target.limiter.has_room():
                self._hand_off(self.target)
