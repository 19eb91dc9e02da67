"""Leader election per backend: one process at a time runs that backend's controller.

Every process campaigns for every backend once per renewal period (`ELECT`: take the seat if it is
empty, with a fresh term from an incrementing counter, like SET NX PX plus a fencing token). The
holder renews its seat (`RENEW_LEADER`) well inside `ttl` (every ttl / 3); if it dies, stalls or
loses Redis, the seat lapses after `ttl` and the next campaign by another process takes it. A
renewal, a resignation and a publication (shared.py) name "<owner>|<term>" and do nothing unless
the seat still holds exactly that value: a deposed leader that wakes up cannot act as leader.

Why a lapse and not a handshake: a dead leader cannot hand over. The cost is up to `ttl` without a
controller, during which every process keeps admitting at the last published limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from gateway.coordination.scripts import ELECT, RENEW_LEADER, RESIGN, Keys


@dataclass(frozen=True, slots=True)
class Term:
    """A won election: `owner` leads `backend` until the seat lapses or is resigned."""

    backend: str
    owner: str
    number: int

    @property
    def token(self) -> str:
        return f"{self.owner}|{self.number}"


class Election:
    def __init__(self, redis: Redis, owner: str, *, keys: Keys | None = None, ttl: float = 10.0) -> None:
        if not ttl > 0:
            raise ValueError(f"ttl must be > 0, got {ttl!r}")
        if "|" in owner:
            raise ValueError(f"owner must not contain '|', got {owner!r}")
        self.owner = owner
        self._keys = keys or Keys()
        self._ttl_ms = max(1, round(ttl * 1000))
        self._elect = redis.register_script(ELECT)
        self._renew = redis.register_script(RENEW_LEADER)
        self._resign = redis.register_script(RESIGN)

    async def campaign(self, backend: str) -> Term | None:
        """The term this process leads `backend` in (extended), or None while another leads."""
        number = int(
            await self._elect(
                keys=[self._keys.leader(backend), self._keys.term(backend)], args=[self.owner, self._ttl_ms]
            )
        )
        return Term(backend, self.owner, number) if number else None

    async def renew(self, term: Term) -> bool:
        """True while `term` still leads; False once it was lost (lapsed, or taken after a lapse)."""
        return bool(
            await self._renew(keys=[self._keys.leader(term.backend)], args=[term.token, self._ttl_ms])
        )

    async def resign(self, term: Term) -> None:
        """Free the seat at shutdown so another process takes it at once instead of after `ttl`."""
        await self._resign(keys=[self._keys.leader(term.backend)], args=[term.token])
