"""Quotas shared by every process and replica through Redis: one atomic script per decision.

Keys (under the namespace's hash tag, so one script's keys share a slot):
    quota-tokens:<tenant>     HASH  level, at (ms, server time): the tokens bucket
    quota-requests:<tenant>   HASH  level, at: the requests bucket
    quota-running:<tenant>    ZSET  hold id -> expiry (ms): requests under way

Why scripts: the refill, the check of all three quotas and the take must be one step, or two
replicas could both spend the last of a bucket; Redis runs a script to completion before any other
command. Time is the Redis server's (`TIME`), as in gateway.coordination.scripts, so replicas' clock
skew does not matter. Buckets follow gateway.tenancy.buckets exactly (levels in units, time in ms);
a bucket key expires once it would be full again, so idle tenants cost no memory. A running
request's hold lapses `hold_ms` after its last renewal, so a replica killed mid-request gives its
holds back on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.tenancy.buckets import WINDOW, Limits

if TYPE_CHECKING:  # the client is made where a redis_url is configured (gateway.tenancy.service)
    from redis.asyncio import Redis

_BUCKETS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function level(key, cap)
  local v = redis.call('HMGET', key, 'level', 'at')
  local lvl, at = tonumber(v[1]), tonumber(v[2])
  if lvl == nil then return cap end
  return math.min(cap, lvl + math.max(0, now - at) * cap / 60000)
end
local function save(key, cap, lvl)
  redis.call('HSET', key, 'level', tostring(lvl), 'at', now)
  redis.call('PEXPIRE', key, math.ceil((cap - lvl) * 60000 / cap) + 1000)
end
"""

ADMIT = (
    _BUCKETS
    + """
-- KEYS: tokens, requests, running. ARGV: tpm, rpm, concurrent (0: none), prompt, hold, hold_ms,
-- enforce (0: take without refusing, for batch lines). Returns {admitted, tokens level, requests
-- level, ms until tokens allow, ms until requests allow, running}.
local tpm, rpm, conc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local prompt, enforce = tonumber(ARGV[4]), ARGV[7] == '1'
local tl, rl = 0, 0
local wait_t, wait_r, running = 0, 0, 0
if tpm > 0 then
  tl = level(KEYS[1], tpm)
  local need = math.min(prompt, tpm)
  if tl < need then wait_t = math.ceil((need - tl) * 60000 / tpm) end
end
if rpm > 0 then
  rl = level(KEYS[2], rpm)
  if rl < 1 then wait_r = math.ceil((1 - rl) * 60000 / rpm) end
end
if conc > 0 and enforce then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  running = redis.call('ZCARD', KEYS[3])
end
local ok = (not enforce) or (wait_t == 0 and wait_r == 0 and (conc == 0 or running < conc))
if ok then
  if tpm > 0 then tl = tl - prompt; save(KEYS[1], tpm, tl) end
  if rpm > 0 then rl = rl - 1; save(KEYS[2], rpm, rl) end
  if conc > 0 and enforce then
    redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), ARGV[5])
    redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[6]) * 2)
    running = running + 1
  end
end
return {ok and 1 or 0, tostring(tl), tostring(rl), wait_t, wait_r, running}
"""
)

CHARGE = (
    _BUCKETS
    + """
-- KEYS: tokens. ARGV: tpm, tokens. Takes tokens learned after admission; the level may go below 0.
local tpm = tonumber(ARGV[1])
local lvl = level(KEYS[1], tpm) - tonumber(ARGV[2])
save(KEYS[1], tpm, lvl)
return tostring(lvl)
"""
)

RELEASE = """
-- KEYS: running. ARGV: hold.
return redis.call('ZREM', KEYS[1], ARGV[1])
"""

RENEW = """
-- KEYS: running. ARGV: hold_ms, hold ids...: extends the holds still present.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = 0
for i = 2, #ARGV do n = n + redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[1]), ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return n
"""


@dataclass(frozen=True, slots=True)
class Admission:
    admitted: bool
    tokens_level: float
    requests_level: float
    tokens_wait: float
    requests_wait: float
    running: int


class RedisQuotas:
    """The scripts above, bound to one client and namespace."""

    def __init__(self, redis: Redis, namespace: str, *, hold_seconds: float) -> None:
        self._ns = namespace
        self.hold_ms = max(1000, round(hold_seconds * 1000))
        self._admit = redis.register_script(ADMIT)
        self._charge = redis.register_script(CHARGE)
        self._release = redis.register_script(RELEASE)
        self._renew = redis.register_script(RENEW)

    def _key(self, kind: str, tenant: str) -> str:
        return f"{{{self._ns}}}:quota-{kind}:{tenant}"

    async def admit(
        self, tenant: str, limits: Limits, prompt_tokens: int, hold: str, *, enforce: bool
    ) -> Admission:
        keys = [self._key(k, tenant) for k in ("tokens", "requests", "running")]
        args: list[str | int | float] = [
            limits.tokens_per_minute or 0,
            limits.requests_per_minute or 0,
            limits.max_concurrent or 0,
            prompt_tokens,
            hold,
            self.hold_ms,
            1 if enforce else 0,
        ]
        ok, tl, rl, wait_t, wait_r, running = await self._admit(keys=keys, args=args)
        return Admission(bool(ok), float(tl), float(rl), int(wait_t) / 1000, int(wait_r) / 1000, int(running))

    async def charge(self, tenant: str, tokens_per_minute: int, tokens: float) -> float:
        level = await self._charge(keys=[self._key("tokens", tenant)], args=[tokens_per_minute, tokens])
        return float(level)

    async def release(self, tenant: str, hold: str) -> None:
        await self._release(keys=[self._key("running", tenant)], args=[hold])

    async def renew(self, tenant: str, holds: list[str]) -> None:
        if holds:
            await self._renew(keys=[self._key("running", tenant)], args=[self.hold_ms, *holds])


def reset_after(capacity: int | None, level: float) -> float:
    """Seconds until a bucket of `capacity` at `level` is full again."""
    if not capacity:
        return 0.0
    return max(0.0, (capacity - level) * WINDOW / capacity)
