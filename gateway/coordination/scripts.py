"""The Lua scripts that change shared state, each one atomic on the Redis server, and the key layout.

Keys (all under one hash tag, `{namespace}`, so every script's keys live in one slot):
    slots:<backend>         ZSET  lease member -> expiry (ms, Redis server time); a lease of n
                            sequences has n members ("<id>", "<id>+1", ...), so ZCARD counts
                            sequences
    lease-tenant:<backend>  HASH  lease member -> tenant
    tenants:<backend>       HASH  tenant -> sequences held (entries at 0 are deleted)
    state:<backend>         HASH  limit, ceiling, signals (JSON), term, published_ms, released
    waiting:<backend>       ZSET  tenant -> expiry (ms): tenants with requests waiting somewhere
    weights:<backend>       HASH  tenant -> weight (from the config every process shares)
    samples:<backend>       STREAM each process's finished requests and queue, for the leader
    leader:<backend>        STRING "<owner>|<term>" with a TTL
    term:<backend>          INTEGER, incremented at every election (the fencing token)
    replicas                ZSET  owner -> expiry (ms): processes alive

Why scripts: a slot is taken only while fewer than `limit` unexpired leases exist, and the count,
the purge of expired leases and the insert must be one step or two processes could both see room
for the last slot. Redis runs a script to completion before any other command, so each script is
that step. Time is the server's (`TIME`), never a replica's, so clock skew between hosts cannot
make a lease live longer or shorter; since Redis 5 scripts replicate their effects, so reading the
clock in a script is allowed and replicas see the same keys.

Why a lease expires: a process killed with SIGKILL never releases; its leases lapse `lease_ms`
after their last renewal and the next acquire purges them, so the slots come back on their own.

Why fencing: a leader paused past its TTL (GC, a stopped container) may wake up believing it still
leads. Each election increments `term`; renewals and publications carry "<owner>|<term>" and are
refused unless the leader key still holds exactly that value, so a deposed leader cannot overwrite
the limit its successor published.
"""

from __future__ import annotations

from dataclasses import dataclass

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_PURGE = """
local function purge(slots, owners, tenants, now)
  local expired = redis.call('ZRANGEBYSCORE', slots, '-inf', now)
  for _, lease in ipairs(expired) do
    local tenant = redis.call('HGET', owners, lease)
    if tenant then
      if redis.call('HINCRBY', tenants, tenant, -1) <= 0 then redis.call('HDEL', tenants, tenant) end
      redis.call('HDEL', owners, lease)
    end
  end
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', slots, '-inf', now) end
end
"""

ACQUIRE = (
    _NOW
    + _PURGE
    + """
-- KEYS: slots, lease-tenant, tenants, state. ARGV: lease, limit, lease_ms, tenant.
-- The published shared limit wins over the caller's; the caller's counts until one is published.
purge(KEYS[1], KEYS[2], KEYS[3], now)
local limit = tonumber(redis.call('HGET', KEYS[4], 'limit') or ARGV[2])
local held = redis.call('ZCARD', KEYS[1])
if held >= limit then return {0, held, limit} end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
redis.call('HINCRBY', KEYS[3], ARGV[4], 1)
return {1, held + 1, limit}
"""
)

ACQUIRE_FAIR = (
    _NOW
    + _PURGE
    + """
-- KEYS: slots, lease-tenant, tenants, state, waiting, weights. ARGV: lease, limit, lease_ms,
-- tenant, weight, waiting_ms. ACQUIRE with the tenants' weighted shares of the limit: the tenant
-- is recorded as waiting (for waiting_ms, renewed by every attempt) with its weight; while other
-- tenants wait, a tenant holding its share or more is refused if one of them holds less than
-- its own, so freed slots go to the tenants under their share whichever process they wait in.
-- Returns {granted, held, limit, refused for the share}.
purge(KEYS[1], KEYS[2], KEYS[3], now)
local tenant = ARGV[4]
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[6]), tenant)
redis.call('HSET', KEYS[6], tenant, ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
local limit = tonumber(redis.call('HGET', KEYS[4], 'limit') or ARGV[2])
local held = redis.call('ZCARD', KEYS[1])
if held >= limit then return {0, held, limit, 0} end
local waiting = redis.call('ZRANGE', KEYS[5], 0, -1)
if #waiting > 1 then
  local total = 0
  local weights = {}
  for _, t in ipairs(waiting) do
    weights[t] = tonumber(redis.call('HGET', KEYS[6], t) or '1')
    total = total + weights[t]
  end
  local mine = tonumber(redis.call('HGET', KEYS[3], tenant) or '0')
  if mine >= limit * weights[tenant] / total then
    for _, t in ipairs(waiting) do
      if t ~= tenant and tonumber(redis.call('HGET', KEYS[3], t) or '0') < limit * weights[t] / total then
        return {0, held, limit, 1}
      end
    end
  end
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], tenant)
redis.call('HINCRBY', KEYS[3], tenant, 1)
return {1, held + 1, limit, 0}
"""
)

RELEASE = """
-- KEYS: slots, lease-tenant, tenants, state. ARGV: channel ('' for none), the number of leases,
-- then their members. A member that already expired was purged (and its tenant count with it):
-- only the count of finished requests moves. With a channel, one message on it tells the
-- processes whose requests wait for this backend that slots are free. Returns the members still held.
local removed = 0
for i = 3, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    removed = removed + 1
    local tenant = redis.call('HGET', KEYS[2], ARGV[i])
    if tenant then
      if redis.call('HINCRBY', KEYS[3], tenant, -1) <= 0 then redis.call('HDEL', KEYS[3], tenant) end
      redis.call('HDEL', KEYS[2], ARGV[i])
    end
  end
end
redis.call('HINCRBY', KEYS[4], 'released', ARGV[2])
if ARGV[1] ~= '' then redis.call('PUBLISH', ARGV[1], '1') end
return removed
"""

_PUT = """
local function put(slots, owners, tenants, lease, tenant, expiry)
  if redis.call('ZADD', slots, expiry, lease) == 1 then
    redis.call('HSET', owners, lease, tenant)
    redis.call('HINCRBY', tenants, tenant, 1)
    return 1
  end
  return 0
end
"""

WIDEN = (
    _NOW
    + _PUT
    + """
-- KEYS: slots, lease-tenant, tenants. ARGV: lease_ms, tenant, then members to add. A granted
-- lease counted as the sequences of the request that took it, without a limit check: the request
-- was admitted while one place was free, as a local slot admits it. Returns the members added.
local added = 0
for i = 3, #ARGV do
  added = added + put(KEYS[1], KEYS[2], KEYS[3], ARGV[i], ARGV[2], now + tonumber(ARGV[1]))
end
return added
"""
)

RENEW = (
    _NOW
    + _PUT
    + """
-- KEYS: replicas, then per backend: slots, lease-tenant, tenants. ARGV: owner, lease_ms,
-- replica_ms, then per backend the number of lease members n and n pairs of member and tenant.
-- Extends every lease of this process and its heartbeat, in one round trip. A lease Redis no
-- longer has (it lapsed during a partition, or Redis restarted empty) is put back without a limit
-- check: its request is still running on the backend, so the shared count must include it.
-- Returns {live replicas, leases put back}.
local restored = 0
local i = 4
for k = 2, #KEYS, 3 do
  local n = tonumber(ARGV[i]); i = i + 1
  for j = 1, n do
    local lease, tenant = ARGV[i], ARGV[i + 1]; i = i + 2
    restored = restored + put(KEYS[k], KEYS[k + 1], KEYS[k + 2], lease, tenant, now + tonumber(ARGV[2]))
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
return {redis.call('ZCARD', KEYS[1]), restored}
"""
)

READ = (
    _NOW
    + _PURGE
    + """
-- KEYS: slots, lease-tenant, tenants, state, replicas. Returns {leases held, live replicas,
-- server time in ms, tenants as a flat list, state as a flat list}.
purge(KEYS[1], KEYS[2], KEYS[3], now)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[5]), now,
        redis.call('HGETALL', KEYS[3]), redis.call('HGETALL', KEYS[4])}
"""
)

ELECT = """
-- KEYS: leader, term. ARGV: owner, ttl_ms. Returns the term this owner leads in (a new one when
-- the seat was empty, its own when it already held it), or 0 when another owner leads.
local current = redis.call('GET', KEYS[1])
if current then
  local owner, term = string.match(current, '^(.*)|(%d+)$')
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(term)
  end
  return 0
end
local term = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. term, 'PX', ARGV[2])
return term
"""

RENEW_LEADER = """
-- KEYS: leader. ARGV: "<owner>|<term>", ttl_ms. 1 while that term still leads, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

RESIGN = """
-- KEYS: leader. ARGV: "<owner>|<term>". Frees the seat only if that term still holds it.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

PUBLISH = (
    _NOW
    + """
-- KEYS: leader, state. ARGV: "<owner>|<term>", limit, ceiling, signals JSON. Fenced: written only
-- while that term leads. Returns 1 when written.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local term = string.match(ARGV[1], '|(%d+)$')
redis.call('HSET', KEYS[2], 'limit', ARGV[2], 'ceiling', ARGV[3], 'signals', ARGV[4],
           'term', term, 'published_ms', now)
return 1
"""
)


@dataclass(frozen=True, slots=True)
class Keys:
    """The key names for one namespace (several gateways may share a Redis under different ones)."""

    namespace: str = "llm-gateway"

    def _key(self, kind: str, backend: str) -> str:
        return f"{{{self.namespace}}}:{kind}:{backend}"

    def slots(self, backend: str) -> str:
        return self._key("slots", backend)

    def lease_tenant(self, backend: str) -> str:
        return self._key("lease-tenant", backend)

    def tenants(self, backend: str) -> str:
        return self._key("tenants", backend)

    def state(self, backend: str) -> str:
        return self._key("state", backend)

    def leader(self, backend: str) -> str:
        return self._key("leader", backend)

    def term(self, backend: str) -> str:
        return self._key("term", backend)

    def waiting(self, backend: str) -> str:
        return self._key("waiting", backend)

    def weights(self, backend: str) -> str:
        return self._key("weights", backend)

    def samples(self, backend: str) -> str:
        return self._key("samples", backend)

    def released_channel(self, backend: str) -> str:
        """Pub/sub channel announcing each release on `backend` (not a key: no hash tag needed)."""
        return f"{self.namespace}:released:{backend}"

    def replicas(self) -> str:
        return f"{{{self.namespace}}}:replicas"

    def lease_keys(self, backend: str) -> list[str]:
        """slots, lease-tenant, tenants, state: the keys ACQUIRE, RELEASE and READ start with."""
        return [self.slots(backend), self.lease_tenant(backend), self.tenants(backend), self.state(backend)]
