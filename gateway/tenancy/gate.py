"""Each tenant's quotas at the door: admit or refuse a request, charge its tokens, end its hold.

Where the counts live:
- without `state.redis_url`: in this process (gateway.tenancy.local);
- with it: in Redis (gateway.tenancy.redis_quota), one atomic script per decision, so every process
  and replica spends from the same buckets;
- with Redis configured but not answering: each replica enforces its share, every quota divided by
  the number of replicas alive at the last contact (as the shared slots do, gateway.coordination.
  fallback), and says so (a warning in the log, the `gateway_quota_local_share` gauge). After a
  failure Redis is tried again once `retry_seconds` have passed, so a Redis that is down does not
  add its timeout to every request.

Tokens learned after admission (output as it streams, the prompt's correction) are charged through
the request's `Hold`, gathered and sent in one call at most every `flush_seconds` and at the end.
A hold ends exactly once (`finish`), which gives back its place among the tenant's running
requests. Batch lines are charged like any request but never refused (`enforce=False`): they
already wait for capacity nobody else wants, and a refused line would spend the batch's attempts.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.tenancy.buckets import Limits, Verdict
from gateway.tenancy.local import CONCURRENT_RETRY, QuotaBook
from gateway.tenancy.redis_quota import Admission, reset_after
from gateway.types import Clock

if TYPE_CHECKING:
    from gateway.tenancy.redis_quota import RedisQuotas

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class Hold:
    """One admitted request's place in its tenant's quotas."""

    tenant: str
    limits: Limits
    verdict: Verdict
    id: str
    shared: bool
    """Admitted through Redis (its running hold is there)."""
    counted: bool
    """Counted among the tenant's running requests."""
    pending: float = 0.0
    finished: bool = False
    flushing: bool = False
    last_flush: float = 0.0


class QuotaGate:
    def __init__(
        self,
        limits: Mapping[str, Limits],
        *,
        clock: Clock,
        redis: RedisQuotas | None = None,
        replicas: Callable[[], int] = lambda: 1,
        on_share: Callable[[bool], None] = lambda local: None,
        retry_seconds: float = 2.0,
        flush_seconds: float = 1.0,
    ) -> None:
        self._limits = dict(limits)
        self._clock = clock
        self._redis = redis
        self._replicas = replicas
        self._on_share = on_share
        self._retry_seconds = retry_seconds
        self.flush_seconds = flush_seconds
        self._book = QuotaBook()
        self._down_until: float | None = None
        """Set while Redis is configured but failed: clock time before which it is not tried."""
        self._running: dict[str, set[str]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def reconfigure(self, limits: Mapping[str, Limits]) -> None:
        self._limits = dict(limits)

    @property
    def local_share(self) -> bool:
        """Redis is configured but not answering: this replica enforces its share."""
        return self._down_until is not None

    async def admit(self, tenant: str, prompt_tokens: int, *, enforce: bool = True) -> Hold | None:
        """A hold on the tenant's quotas, or None when the tenant has none. A refused request's
        hold has `verdict.allowed` False and holds nothing."""
        limits = self._limits.get(tenant)
        if limits is None:
            return None
        hold_id = secrets.token_hex(8)
        if self._redis is not None and self._redis_due():
            try:
                got = await self._redis.admit(tenant, limits, prompt_tokens, hold_id, enforce=enforce)
            except Exception as exc:  # any failure to reach Redis: the local share
                self._lost(exc)
            else:
                self._contact()
                verdict = _verdict(limits, got)
                counted = verdict.allowed and enforce and limits.max_concurrent is not None
                if counted:
                    self._running.setdefault(tenant, set()).add(hold_id)
                return Hold(tenant, limits, verdict, hold_id, True, counted, last_flush=self._clock())
        return self._admit_local(tenant, limits, prompt_tokens, hold_id, enforce)

    def charge(self, hold: Hold, tokens: float) -> None:
        """Tokens learned after admission; sent on at most every `flush_seconds` (and at the end)."""
        if hold.finished or not tokens or hold.limits.tokens_per_minute is None:
            return
        hold.pending += tokens
        if self._clock() - hold.last_flush >= self.flush_seconds and not hold.flushing:
            self._spawn(self._flush(hold))

    def finish(self, hold: Hold) -> None:
        """The request ended: charge what is pending and give back its running place. Once."""
        if hold.finished:
            return
        hold.finished = True
        if not hold.verdict.allowed:
            return
        self._spawn(self._end(hold))

    async def renew(self) -> None:
        """Extend the running holds this process has in Redis (run every few seconds)."""
        if self._redis is None or not self._redis_due():
            return
        for tenant, holds in list(self._running.items()):
            try:
                await self._redis.renew(tenant, list(holds))
            except Exception as exc:
                self._lost(exc)
                return

    async def close(self) -> None:
        """Wait for the charges and releases under way."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- inside ---------------------------------------------------------------------------------

    def _admit_local(self, tenant: str, limits: Limits, prompt: int, hold_id: str, enforce: bool) -> Hold:
        now = self._clock()
        share = limits.scaled(self._replicas()) if self.local_share else limits
        if enforce:
            verdict = self._book.admit(tenant, share, prompt, now)
        else:
            verdict = self._book.take(tenant, share, prompt, now)
        counted = verdict.allowed and enforce
        return Hold(tenant, share, verdict, hold_id, False, counted, last_flush=now)

    async def _flush(self, hold: Hold) -> None:
        hold.flushing = True
        try:
            while hold.pending:
                tokens, hold.pending = hold.pending, 0.0
                hold.last_flush = self._clock()
                await self._charge(hold, tokens)
        finally:
            hold.flushing = False

    async def _charge(self, hold: Hold, tokens: float) -> None:
        tpm = hold.limits.tokens_per_minute
        if tpm is None:
            return
        if self._redis is not None and self._redis_due():
            try:
                await self._redis.charge(hold.tenant, tpm, tokens)
                self._contact()
                return
            except Exception as exc:
                self._lost(exc)
        self._book.charge(hold.tenant, hold.limits, tokens, self._clock())

    async def _end(self, hold: Hold) -> None:
        if not hold.flushing:
            await self._flush(hold)
        if not hold.counted:
            return
        if not hold.shared:
            self._book.release(hold.tenant)
            return
        running = self._running.get(hold.tenant)
        if running is not None:
            running.discard(hold.id)
            if not running:
                del self._running[hold.tenant]
        if self._redis is not None and self._redis_due():
            try:
                await self._redis.release(hold.tenant, hold.id)
                self._contact()
            except Exception as exc:  # the hold lapses in Redis on its own
                self._lost(exc)

    def _spawn(self, coro: Coroutine[None, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _redis_due(self) -> bool:
        return self._down_until is None or self._clock() >= self._down_until

    def _lost(self, exc: BaseException) -> None:
        first = self._down_until is None
        self._down_until = self._clock() + self._retry_seconds
        if first:
            log.warning(
                "quotas: Redis is not answering (%r); each replica enforces its share, every quota "
                "divided by %d replicas alive at the last contact",
                exc,
                self._replicas(),
            )
            self._on_share(True)

    def _contact(self) -> None:
        if self._down_until is not None:
            self._down_until = None
            log.info("quotas: Redis answers again; quotas are shared across replicas")
            self._on_share(False)


def _verdict(limits: Limits, got: Admission) -> Verdict:
    waits = {"tokens": got.tokens_wait, "requests": got.requests_wait}
    if not got.admitted and limits.max_concurrent is not None and got.running >= limits.max_concurrent:
        waits["concurrent"] = CONCURRENT_RETRY
    reason = max(waits, key=lambda k: waits[k]) if not got.admitted else ""
    tpm, rpm = limits.tokens_per_minute, limits.requests_per_minute
    return Verdict(
        allowed=got.admitted,
        limits=limits,
        remaining_tokens=got.tokens_level if tpm else None,
        remaining_requests=got.requests_level if rpm else None,
        reset_tokens=reset_after(tpm, got.tokens_level),
        reset_requests=reset_after(rpm, got.requests_level),
        retry_after=0.0 if got.admitted else max(waits.values()),
        reason=reason,
    )
