"""The backend pool: which backends serve a model, which are in rotation, and which one gets a slot.

A backend leaves rotation when its health check fails or after `failure_threshold` consecutive failed
requests (passive ejection); it returns after an exponential backoff once a health check passes.
Choice is late: `try_acquire` runs when a request is about to be dispatched, and picks the backend
with the largest share of its limit free, so a slow backend (lower limit) gets proportionally less.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.config import BackendConfig, HealthConfig
from gateway.limiter import Limiter, Slot
from gateway.types import BackendSignals, Clock, Sample


class Backend:
    def __init__(self, config: BackendConfig, limiter: Limiter, health: HealthConfig, clock: Clock) -> None:
        self.config = config
        self.name = config.name
        self.url = config.url
        self.limiter = limiter
        self.models: frozenset[str] = frozenset(config.models)
        self.healthy = False
        self.signals: BackendSignals | None = None
        self.ejected_until = 0.0
        self.ejections = 0
        self.consecutive_failures = 0
        self.last_error = ""
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

    def record_success(self) -> None:
        self.consecutive_failures = 0
        self.ejections = 0

    def record_failure(self, error: str) -> bool:
        """Count a failed request or check; returns True when this failure ejected the backend.

        Failures of a backend already out of rotation (its in-flight streams breaking as it dies)
        are not new evidence: counting them would eject it again and double its backoff each time.
        """
        self.last_error = error
        if not self.in_rotation(self._clock()):
            return False
        self.consecutive_failures += 1
        if self.consecutive_failures < self._health.failure_threshold:
            return False
        backoff = min(self._health.backoff_max, self._health.backoff_initial * 2.0 ** min(self.ejections, 16))
        self.ejections += 1
        self.ejected_until = self._clock() + backoff
        self.healthy = False
        self.consecutive_failures = 0
        return True

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
        return out


class Lease:
    """One dispatched request's hold on a backend slot. Released exactly once."""

    __slots__ = ("backend", "slot", "target")

    def __init__(self, target: Backend, slot: Slot) -> None:
        self.target = target
        self.slot = slot
        self.backend = target.name

    def release(self, sample: Sample | None) -> None:
        self.slot.release(sample)


class Pool:
    def __init__(self, backends: Iterable[Backend], clock: Clock) -> None:
        self.backends = tuple(backends)
        self._clock = clock

    def try_acquire(self, model: str, exclude: Iterable[Backend] = ()) -> Lease | None:
        now = self._clock()
        best: Backend | None = None
        best_free = 0.0
        for b in self.backends:
            if model not in b.models or not b.in_rotation(now) or b in exclude:
                continue
            lim = b.limiter
            free = lim.limit - lim.inflight
            if free <= 0:
                continue
            share = free / lim.limit
            if share > best_free:
                best, best_free = b, share
        if best is None:
            return None
        return Lease(best, best.limiter.acquire())

    def available(self, model: str) -> bool:
        now = self._clock()
        return any(model in b.models and b.in_rotation(now) for b in self.backends)

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
        return not any(
            model in b.models and b.in_rotation(now) and b.limiter.has_room() for b in self.backends
        )
