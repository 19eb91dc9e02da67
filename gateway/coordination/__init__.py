"""Shared admission across processes and replicas, through Redis (`state.redis_url`).

Without `state.redis_url` nothing here is used: one process owns each backend's limit, in-flight
count and queue. With it, every process that names the same Redis (and namespace) shares, per
backend: the in-flight count (slots are leases in Redis), one limit set by one elected leader, the
engine's stats from the leader's one scrape, the leases per tenant, and the rate requests finish.

A shared slot (`SharedSlot`, shared_slots.py) is a lease in Redis: one request's place in a
backend's in-flight count across every process. The interface (`SlotBackend`):

    class SlotBackend(Protocol):
        async def try_acquire(self, backend: str, tenant: str, limit: int) -> SharedSlot | None
        async def release(self, lease: SharedSlot) -> None       # exactly once per lease
        def held(self, backend: str) -> int                      # leases this process holds

- `RedisSlots` (redis_slots.py): one atomic script per acquire and per release; `limit` is used until
  the backend's leader has published one, then the published limit decides. Leases lapse
  `lease_seconds` (default 10) after their last renewal; `renew()` extends all of a process's
  leases and its heartbeat in one round trip.
- `CoordinatedSlots` (coordinator.py): `RedisSlots` plus the fallback (fallback.py): when Redis
  does not answer, each process admits up to the last limit it saw divided by the last count of
  live processes, never 0 and never unlimited, and the first renewal that gets through puts its
  running requests back into Redis.

And the controller side (`Coordinator`, coordinator.py): `step()` every lease_seconds / 3 renews,
campaigns for each backend's seat (leader.py: one leader per backend, fenced terms, failover when
a seat lapses), and reads each backend's `SharedView` (shared.py: shared in-flight, tenants'
leases, finished-request counter, live replicas, the leader's published limit, ceiling and engine
stats). `publish(backend, limit, ceiling, stats)` writes them, only while this process leads.
`drain_rate(backend)` is the shared rate of finished requests (rates.py); `state()` is for
/admin/state.

How admission uses them (wired by gateway.runtime.sharing): pump.py takes a lease per waiting request
(`try_acquire_fair`: within the tenants' weighted shares across processes) and hands it to the
synchronous dispatch; wakeups.py hears other processes' releases (pub/sub); samples.py carries the
followers' finished requests and queue lengths to each backend's leader (a Redis stream).

Modules: url.py (the accepted URL forms, pure), connection.py (the client), scripts.py (the Lua
scripts and the key layout), shared_slots.py, redis_slots.py, leader.py, shared.py, rates.py, fallback.py,
coordinator.py, pump.py, wakeups.py, samples.py. Only connection.py and the modules that talk to
Redis import the client, and nothing here runs at import time.
"""
