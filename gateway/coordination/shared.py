"""What one backend's shared state holds, written by its leader and read by every process.

The leader publishes, fenced by its term (PUBLISH in scripts.py): the limit every process admits
against, the ceiling it is bounded by, and the engine's stats from its one scrape of the
backend's /metrics, so N replicas neither scrape N times nor each count every preemption as their
own. Every process reads (READ), in one round trip: the leases held across all processes, the
leases per tenant (what fair queueing needs to see across replicas), the count of finished
requests (whose rate is the shared drain rate behind Retry-After, see rates.py), the live replica
count (what the fallback divides the limit by), and the published state with its age.

Signals travel as JSON without their `at` (a clock reading means nothing on another host); the
reader stamps them with its own clock minus the publication's age.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from redis.asyncio import Redis

from gateway.coordination.leader import Term
from gateway.coordination.scripts import PUBLISH, READ, Keys
from gateway.types import Clock, EngineStats


@dataclass(frozen=True, slots=True)
class SharedView:
    """One read of a backend's shared state."""

    backend: str
    inflight: int
    """Unexpired leases across every process."""
    replicas: int
    tenants: dict[str, int] = field(default_factory=dict)
    """Leases held per tenant across every process."""
    released: int = 0
    """Requests finished since the state was created (a counter; its rate is the drain rate)."""
    limit: int | None = None
    """The leader's published limit; None before any leader published."""
    ceiling: int | None = None
    term: int | None = None
    age: float | None = None
    """Seconds since the leader published, by the Redis server's clock."""
    engine_stats: EngineStats | None = None


def encode_engine_stats(stats: EngineStats | None) -> str:
    if stats is None:
        return ""
    data = asdict(stats)
    del data["at"]
    return json.dumps(data, separators=(",", ":"))


def decode_engine_stats(text: str, at: float) -> EngineStats | None:
    if not text:
        return None
    known = set(EngineStats.__dataclass_fields__) - {"at"}
    return EngineStats(at=at, **{k: v for k, v in json.loads(text).items() if k in known})


class SharedState:
    def __init__(self, redis: Redis, *, keys: Keys | None = None, clock: Clock) -> None:
        self._keys = keys or Keys()
        self._clock = clock
        self._publish = redis.register_script(PUBLISH)
        self._read = redis.register_script(READ)

    async def publish(self, term: Term, limit: int, ceiling: int, stats: EngineStats | None) -> bool:
        """Write the backend's limit as its leader; False (nothing written) once `term` was lost."""
        keys = [self._keys.leader(term.backend), self._keys.state(term.backend)]
        args: list[str | int] = [term.token, limit, ceiling, encode_engine_stats(stats)]
        return bool(await self._publish(keys=keys, args=args))

    async def read(self, backend: str) -> SharedView:
        keys = [*self._keys.lease_keys(backend), self._keys.replicas()]
        inflight, replicas, now_ms, tenants, state = await self._read(keys=keys)
        return _view(
            backend, int(inflight), int(replicas), int(now_ms), _pairs(tenants), _pairs(state), self._clock()
        )


def _pairs(flat: list[Any]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _view(
    backend: str,
    inflight: int,
    replicas: int,
    now_ms: int,
    tenants: dict[str, str],
    state: dict[str, str],
    now: float,
) -> SharedView:
    published = state.get("published_ms")
    age = max(0.0, (now_ms - int(published)) / 1000) if published else None
    return SharedView(
        backend=backend,
        inflight=inflight,
        replicas=replicas,
        tenants={t: int(n) for t, n in tenants.items()},
        released=int(state.get("released", 0)),
        limit=int(state["limit"]) if "limit" in state else None,
        ceiling=int(state["ceiling"]) if "ceiling" in state else None,
        term=int(state["term"]) if "term" in state else None,
        age=age,
        engine_stats=decode_engine_stats(state.get("signals", ""), now - (age or 0.0)),
    )
