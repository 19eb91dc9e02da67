"""AdmissionQueue: fast path, wake, order, deadlines, shedding, fairness under a flood, cancellation."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from collections.abc import Awaitable, Collection, Sequence
from typing import Any

import pytest
from admission_fakes import FakeLease, FakePool, make_queue, settle

from gateway.admission import AdmissionQueue, Rejected, Releasable, Ticket
from gateway.admission.advice import golden
from gateway.routing import RouteKey
from tests.clock import FakeClock


def make(
    capacity: int = 0, *, clock: FakeClock | None = None, **kw: Any
) -> tuple[AdmissionQueue[FakeLease], FakePool, FakeClock]:
    # A refusal in a cold queue waits (in real time) until a rate could be measured: keep it short.
    kw.setdefault("min_backlog", 0.05)
    return make_queue(capacity, clock=clock, **kw)


async def bounded(admission: Awaitable[Releasable]) -> Releasable:
    """An admission expected to end by itself: a hang fails the test instead of stalling it."""
    return await asyncio.wait_for(admission, timeout=10)


def spawn(q: AdmissionQueue, ticket: Ticket, log: list[str]) -> asyncio.Task[Releasable]:
    async def run() -> Releasable:
        lease = await q.admit(ticket)
        log.append(ticket.request_id or "")
        return lease

    return asyncio.create_task(run())


async def serve_one_at_a_time(pool: FakePool, n: int) -> None:
    for _ in range(n):
        pool.open(1)
        await settle()


async def test_fast_path_completes_without_suspending() -> None:
    q, pool, _ = make(capacity=1)
    coro = q.admit(Ticket("a"))
    with pytest.raises(StopIteration) as done:
        coro.send(None)  # one step: no await on a future happened
    lease = done.value.value
    assert isinstance(lease, FakeLease) and pool.inflight == 1
    assert q.depth == 0 and q.counters.admitted_fast == 1


async def test_waiters_are_woken_as_many_as_slots_allow() -> None:
    q, pool, _ = make(capacity=0)
    log: list[str] = []
    tasks = [spawn(q, Ticket("a", request_id=str(i)), log) for i in range(5)]
    await settle()
    assert q.depth == 5 and log == []
    pool.capacity = 3
    q.wake()
    await settle()
    assert log == ["0", "1", "2"] and q.depth == 2 and pool.inflight == 3
    q.wake()  # no room: nothing moves
    await settle()
    assert q.depth == 2
    (await tasks[0]).release(None)  # release wakes the queue
    await settle()
    assert log == ["0", "1", "2", "3"] and q.depth == 1
    for t in tasks[:4]:
        if t is not tasks[0]:
            (await t).release(None)
    await settle()
    (await tasks[4]).release(None)
    assert pool.inflight == 0 and q.depth == 0


async def test_a_newcomer_does_not_overtake_waiters() -> None:
    q, pool, _ = make(capacity=0)
    log: list[str] = []
    spawn(q, Ticket("a", request_id="first"), log)
    await settle()
    pool.capacity = 1  # room appears without a wake; the next arrival must not take it first
    spawn(q, Ticket("a", request_id="second"), log)
    await settle()
    assert log == ["first"] and q.depth == 1


async def test_priority_then_fairness_then_fifo() -> None:
    q, pool, _ = make(capacity=0, tenant_weights={"big": 2.0})
    log: list[str] = []
    for i in range(4):
        spawn(q, Ticket("big", request_id=f"big{i}"), log)
    for i in range(2):
        spawn(q, Ticket("small", request_id=f"small{i}"), log)
    spawn(q, Ticket("small", priority=1, request_id="urgent"), log)
    await settle()
    await serve_one_at_a_time(pool, 7)
    assert log[0] == "urgent"
    # big has twice small's weight: two of big's for each of small's, FIFO within each.
    assert log[1:] == ["big0", "small0", "big1", "big2", "small1", "big3"]


async def test_queue_timeout_is_a_503_after_the_deadline() -> None:
    q, _, clock = make(capacity=0, timeout=5.0)
    task = asyncio.create_task(q.admit(Ticket("a")))
    short = asyncio.create_task(q.admit(Ticket("a", timeout=1.0)))
    capped = asyncio.create_task(q.admit(Ticket("a", timeout=99.0)))
    await settle()
    clock.advance(1.5)
    q.wake()
    await settle()
    assert short.done() and not task.done() and q.depth == 2
    clock.advance(3.6)
    q.wake()
    await settle()
    for t in (task, capped):  # the per-request timeout is capped by the queue's
        err = t.exception()
        assert isinstance(err, Rejected)
        assert (err.status, err.reason) == (503, "queue_timeout")
        assert "waited 5.1s" in err.message
    assert q.depth == 0 and q.counters.rejected == {"queue_timeout": 3}


async def test_the_loop_timer_expires_waiters_without_any_wake() -> None:
    q = AdmissionQueue("m", FakePool(capacity=0), clock=time.monotonic, max_depth=10, timeout=0.05)
    with pytest.raises(Rejected) as err:
        await bounded(q.admit(Ticket("a")))
    assert err.value.reason == "queue_timeout" and q.depth == 0


async def build_backlog(q: AdmissionQueue, pool: FakePool, clock: FakeClock) -> list[FakeLease]:
    """One slot; dispatch 6 queued requests one every 0.5 s: a measured drain of ~2/s."""
    held = [await q.admit(Ticket("a"))]
    assert isinstance(held[0], FakeLease)
    log: list[str] = []
    tasks = [spawn(q, Ticket("a"), log) for _ in range(10)]
    await settle()
    for i in range(6):
        clock.advance(0.5)
        held[i].release(None)
        await settle()
        lease = await bounded(tasks[i])
        assert isinstance(lease, FakeLease)
        held.append(lease)
    return held


async def test_a_deadline_that_cannot_be_met_is_refused_at_once() -> None:
    q, pool, clock = make(capacity=1, drain_tau=2.0)  # firm after 2 s of backlog
    await build_backlog(q, pool, clock)
    rate = q.drain_rate
    assert rate == pytest.approx(2.0, rel=0.15)  # a 2 s average read just after a dispatch
    assert q.depth == 4
    expected = q.estimated_wait("a")
    assert expected == pytest.approx(5 / rate)
    with pytest.raises(Rejected) as err:
        await bounded(q.admit(Ticket("a", timeout=1.0)))
    assert (err.value.status, err.value.reason) == (429, "deadline")
    assert err.value.retry_after == pytest.approx(expected)
    assert err.value.should_retry
    assert "4 requests ahead" in err.value.message
    assert q.depth == 4
    # With time enough it waits.
    waiting = asyncio.create_task(q.admit(Ticket("a", timeout=10.0)))
    await settle()
    assert q.depth == 5 and not waiting.done()


async def test_full_queue_without_a_firm_rate_spreads_the_refused_over_its_timeout() -> None:
    """Nothing measured: the queue's waiters all leave within its timeout, so the refused are
    spread evenly between the configured default and the timeout (0.618, 0.236, 0.854 of the way)."""
    q, _, _ = make(capacity=0, max_depth=2, default_retry_after=1.5, timeout=30.0)
    [asyncio.create_task(q.admit(Ticket("a"))) for _ in range(2)]
    await settle()
    advice = []
    for _ in range(3):
        with pytest.raises(Rejected) as err:
            await bounded(q.admit(Ticket("a")))
        assert (err.value.status, err.value.reason) == (429, "queue_full")
        assert err.value.should_retry
        advice.append(err.value.retry_after)
    assert advice == pytest.approx([1.5 + 28.5 * golden(k) for k in (1, 2, 3)])


async def test_a_queue_too_slow_to_serve_a_return_within_its_deadline_says_do_not_retry() -> None:
    q, pool, clock = make(capacity=1, max_depth=10, timeout=30.0)
    await build_backlog(q, pool, clock)
    clock.advance(40.0)  # nothing dispatched for 40 s: the rate falls below 0.05/s
    rate = q.drain_rate
    assert rate is not None and 5 / rate > 60 + 30  # its turn: past 60 s and a whole deadline
    with pytest.raises(Rejected) as err:
        await bounded(q.admit(Ticket("a")))
    assert err.value.reason == "deadline"
    assert err.value.retry_after > 60 and not err.value.should_retry


async def test_the_queue_holds_past_max_depth_what_drains_within_its_timeout() -> None:
    """A drain of ~2/s serves 20 within a 10 s timeout: with 12 places, 18 waiters are taken in
    rather than refusing 6 the backend would serve in time; past what drains in time, no more."""
    q, pool, clock = make(capacity=1, max_depth=12, timeout=10.0, drain_tau=2.0)
    await build_backlog(q, pool, clock)  # 4 waiting
    rate = q.drain_rate
    assert rate is not None
    more = [asyncio.create_task(q.admit(Ticket("a"))) for _ in range(14)]
    await settle()
    assert q.depth == 18 and not any(t.done() for t in more)
    assert q.state()["bound"] == int(rate * 10.0) > 12
    with pytest.raises(Rejected) as err:  # its wait at 2/s would pass the deadline
        await bounded(q.admit(Ticket("a", timeout=5.0)))
    assert err.value.reason == "deadline"


async def test_no_healthy_backend_is_a_503_without_queueing() -> None:
    q, pool, _ = make(capacity=0)
    pool.healthy = False
    with pytest.raises(Rejected) as err:
        await bounded(q.admit(Ticket("a")))
    assert (err.value.status, err.value.reason) == (503, "no_backend")
    assert q.depth == 0


async def test_a_flooding_tenant_is_pushed_out_for_a_light_one() -> None:
    q, _, _ = make(capacity=0, max_depth=10)
    flood = [asyncio.create_task(q.admit(Ticket("flood"))) for _ in range(10)]
    await settle()
    light = [asyncio.create_task(q.admit(Ticket("light"))) for _ in range(5)]
    await settle()
    # Each light request displaced the flood's newest waiter.
    assert q.state()["tenants"] == {"flood": 5, "light": 5}
    pushed = [t for t in flood if t.done()]
    assert pushed == flood[5:]
    for t in pushed:
        err = t.exception()
        assert isinstance(err, Rejected)
        assert (err.status, err.reason) == (429, "tenant_over_share")
    # At its share, light is refused too; flood, at its share, gets the same answer.
    for tenant in ("light", "flood"):
        with pytest.raises(Rejected) as err:
            await bounded(q.admit(Ticket(tenant)))
        assert err.value.reason == "tenant_over_share"
    assert not any(t.done() for t in light)


class OneSlot:
    """Tenants' clients against a queue whose one slot frees once per 0.1 s step."""

    def __init__(self, q: AdmissionQueue, clock: FakeClock) -> None:
        self.q, self.clock = q, clock
        self.served: Counter[str] = Counter()
        self.shed: Counter[str] = Counter()
        self.tasks: list[asyncio.Task[None]] = []
        self._held: list[Releasable] = []

    async def _client(self, tenant: str) -> None:
        try:
            self._held.append(await self.q.admit(Ticket(tenant)))
            self.served[tenant] += 1
        except Rejected:
            self.shed[tenant] += 1

    async def step(self, tenants: list[str]) -> None:
        """Send one request per name in `tenants`, then let 0.1 s pass and the slot free."""
        self.tasks += [asyncio.create_task(self._client(t)) for t in tenants]
        await settle()
        self.clock.advance(0.1)
        if self._held:
            self._held.pop(0).release(None)
        await settle()


async def test_under_a_flood_the_light_tenant_is_served_at_its_share() -> None:
    """Closed loop: one slot frees per step; flood sends 4 per step, light 1 every 3 steps."""
    q, pool, clock = make(capacity=1, max_depth=8)
    loop = OneSlot(q, clock)
    for step in range(300):
        await loop.step(["flood"] * 4 + (["light"] if step % 3 == 0 else []))
    served, shed = loop.served, loop.shed
    assert sum(served.values()) == 1 + 300  # one slot, freed 300 times: never idle while requests waited
    # light wanted a third of the capacity, under its half: it got all of it; flood the rest.
    assert served["light"] >= 99 and shed["light"] == 0
    assert shed["flood"] > 800
    pool.open(1000)
    await asyncio.wait_for(asyncio.gather(*loop.tasks), timeout=10)
    assert served["light"] == 100 and shed["light"] == 0


async def test_two_heavy_tenants_split_the_capacity_by_weight() -> None:
    q, pool, clock = make(capacity=1, max_depth=12, tenant_weights={"gold": 3.0})
    loop = OneSlot(q, clock)
    for _ in range(200):
        await loop.step(["gold", "gold", "iron", "iron"])
    share = loop.served["gold"] / (loop.served["gold"] + loop.served["iron"])
    assert share == pytest.approx(0.75, abs=0.05)
    pool.open(1000)
    await asyncio.wait_for(asyncio.gather(*loop.tasks), timeout=10)


async def test_cancelled_while_queued_leaves_at_once() -> None:
    q, pool, _ = make(capacity=0)
    log: list[str] = []
    gone = spawn(q, Ticket("a", request_id="gone"), log)
    stays = spawn(q, Ticket("a", request_id="stays"), log)
    await settle()
    gone.cancel()
    await settle()
    assert gone.cancelled() and q.depth == 1 and q.counters.cancelled == 1
    pool.open(1)
    await settle()
    assert log == ["stays"] and pool.inflight == 1 and len(pool.leases) == 1
    (await stays).release(None)


async def test_cancelled_future_is_skipped_before_its_task_runs() -> None:
    q, pool, _ = make(capacity=0)
    log: list[str] = []
    gone = spawn(q, Ticket("a", request_id="gone"), log)
    stays = spawn(q, Ticket("a", request_id="stays"), log)
    await settle()
    gone.cancel()
    pool.open(1)  # same tick: the cancelled waiter is still queued
    await settle()
    assert gone.cancelled() and log == ["stays"] and len(pool.leases) == 1
    (await stays).release(None)
    assert pool.inflight == 0 and q.depth == 0


async def test_cancel_after_grant_in_the_same_tick_releases_the_lease_once() -> None:
    q, pool, _ = make(capacity=0)
    log: list[str] = []
    task = spawn(q, Ticket("a", request_id="x"), log)
    await settle()
    pool.capacity = 1
    q.wake()  # the lease is set on the future...
    assert pool.inflight == 1
    task.cancel()  # ...and the client goes away before the task resumes
    await settle()
    assert task.cancelled() and log == []
    assert [lease.releases for lease in pool.leases] == [1]
    assert pool.inflight == 0 and q.depth == 0 and q.counters.cancelled == 1


async def test_state_is_json_ready_and_on_change_fires() -> None:
    changes = []
    q, pool, clock = make(capacity=0, on_change=lambda: changes.append(q.depth))
    tasks = [asyncio.create_task(q.admit(Ticket(t, priority=p))) for t, p in [("a", 0), ("b", 1)]]
    await settle()
    clock.advance(2.0)
    state = q.state()
    json.dumps(state)
    assert state["depth"] == 2 and state["tenants"] == {"a": 1, "b": 1}
    assert state["priorities"] == {"1": 1, "0": 1}
    assert state["oldest_wait"] == 2.0 and state["drain_rate"] is None
    assert changes == [1, 2]
    pool.open(2)
    assert changes[-1] == 0
    for t in tasks:
        (await t).release(None)


async def test_close_answers_every_waiter() -> None:
    q, pool, _ = make(capacity=0)
    tasks = [asyncio.create_task(q.admit(Ticket(t))) for t in "abc"]
    await settle()
    q.close()
    await settle()
    for t in tasks:
        err = t.exception()
        assert isinstance(err, Rejected) and err.status == 503
    assert q.depth == 0
    pool.open(1)
    lease = await bounded(q.admit(Ticket("a")))
    lease.release(None)
    assert pool.inflight == 0


async def test_a_burst_of_refusals_is_told_to_come_back_one_slot_apart() -> None:
    q, pool, clock = make(capacity=1, max_depth=10, timeout=3600.0, drain_tau=2.0)
    await build_backlog(q, pool, clock)  # measured drain ~2/s, 4 waiting
    fill = [asyncio.create_task(q.admit(Ticket("a"))) for _ in range(6)]
    await settle()
    assert q.depth == 10 and not any(t.done() for t in fill)
    rate = q.drain_rate
    assert rate is not None
    waits = []
    for _ in range(5):
        with pytest.raises(Rejected) as err:
            await bounded(q.admit(Ticket("a", timeout=1.0)))
        assert err.value.reason == "deadline"  # 10 ahead at 2/s: past its 1 s
        waits.append(err.value.retry_after)
    # The first is told the queue's drain time; each later one a slot's time after the one before.
    assert waits[0] == pytest.approx(11 / rate, rel=0.01)
    for before, after in itertools.pairwise(waits):
        assert after - before == pytest.approx(1 / rate, rel=0.01)


async def test_a_burst_into_a_cold_queue_is_trimmed_once_the_drain_rate_is_firm() -> None:
    """No rate is known when 20 arrive, so all queue. One slot every 0.5 s is measured after 1 s,
    but refusing on it waits until it is firm (2 s of backlog here): then the newest, whose turn
    would come after their 5 s deadline, are refused at once, not after 5 s."""
    q, _, clock = make(capacity=1, timeout=5.0, drain_tau=2.0)
    held = await q.admit(Ticket("a"))
    log: list[str] = []
    tasks = [spawn(q, Ticket("a", request_id=str(i)), log) for i in range(20)]
    await settle()
    assert q.depth == 20

    def refused() -> list[int]:
        return [i for i, t in enumerate(tasks) if t.done() and t.exception() is not None]

    for step in range(4):  # a slot frees every 0.5 s
        clock.advance(0.5)
        assert isinstance(held, FakeLease)
        held.release(None)
        await settle()
        held = await bounded(tasks[len(log) - 1])
        if step < 3:
            assert not refused(), "refused on a rate that is not firm yet"
    rate = q.drain_rate
    assert rate == pytest.approx(2.0, rel=0.2)
    gone = refused()
    left = 5.0 - 2.0
    # The ones still queued are those served within the deadline left; the newest are refused.
    assert q.depth == len(tasks) - len(log) - len(gone)
    assert q.depth / rate <= left < (q.depth + 2) / rate
    assert gone and gone == list(range(20 - len(gone), 20))
    for i in gone:
        err = tasks[i].exception()
        assert isinstance(err, Rejected)
        assert (err.status, err.reason) == (429, "deadline") and err.should_retry
        assert "left of its deadline" in err.message
    assert q.counters.rejected == {"deadline": len(gone)}
    for t in tasks:
        t.cancel()
    await settle()


class WarmPool(FakePool):
    """A backend that holds the prefix of requests whose session is 'warm' prefers them."""

    def pick(
        self,
        model: str,
        routes: Sequence[object],
        *,
        exclude: Collection[str] = (),
        background: bool = False,
    ) -> tuple[int, FakeLease] | None:
        got = super().pick(model, routes, exclude=exclude, background=background)
        if got is None:
            return None
        sessions = [getattr(r, "session", None) for r in routes]
        warm = RouteKey(session="warm").session  # sessions are held hashed
        return (sessions.index(warm) if warm in sessions else 0), got[1]


def make_warm(lookahead: int) -> tuple[AdmissionQueue[FakeLease], WarmPool]:
    pool = WarmPool()
    q, _, _ = make_queue(pool=pool, clock=FakeClock(), lookahead=lookahead)
    return q, pool


def routed(tenant: str, name: str, session: str) -> Ticket:
    return Ticket(tenant, request_id=name, route=RouteKey(prompt="p", session=session))


async def test_a_free_slot_goes_to_the_waiter_that_fits_it_among_the_next_lookahead() -> None:
    q, pool = make_warm(lookahead=3)
    log: list[str] = []
    tasks = [
        spawn(q, routed("a", name, "warm" if name.startswith("w") else "cold"), log)
        for name in ("c0", "c1", "w0", "c2", "w1")
    ]
    await settle()
    await serve_one_at_a_time(pool, 5)
    # Windows: [c0 c1 w0] -> w0; [c0 c1 c2] has no warm one -> c0; [c1 c2 w1] -> w1; then c1, c2.
    assert log == ["w0", "c0", "w1", "c1", "c2"]
    for t in tasks:
        (await t).release(None)


async def test_a_waiter_is_passed_over_at_most_lookahead_times() -> None:
    q, pool = make_warm(lookahead=2)
    log: list[str] = []
    tasks = [spawn(q, routed("a", "cold", "cold"), log)]
    tasks += [spawn(q, routed("a", f"w{i}", "warm"), log) for i in range(4)]
    await settle()
    await serve_one_at_a_time(pool, 5)
    assert log == ["w0", "w1", "cold", "w2", "w3"]
    for t in tasks:
        (await t).release(None)


async def test_lookahead_one_is_first_come_first_served_and_tenants_keep_their_turns() -> None:
    q, pool = make_warm(lookahead=1)
    log: list[str] = []
    tasks = [spawn(q, routed("a", f"{s}{i}", s), log) for i in range(2) for s in ("cold", "warm")]
    await settle()
    await serve_one_at_a_time(pool, 4)
    assert log == ["cold0", "warm0", "cold1", "warm1"]

    q, pool = make_warm(lookahead=4)
    log = []
    tasks += [spawn(q, routed("a", f"a{i}", "cold"), log) for i in range(3)]
    tasks += [spawn(q, routed("b", f"b{i}", "warm"), log) for i in range(3)]
    await settle()
    await serve_one_at_a_time(pool, 6)
    # Tenant b's warm waiters do not take tenant a's turns.
    assert log == ["a0", "b0", "a1", "b1", "a2", "b2"]
    for t in tasks:
        (await t).release(None)


async def test_a_retry_waits_its_turn_behind_those_queued_before_it() -> None:
    q, pool, _ = make(0)
    log: list[str] = []
    first = spawn(q, Ticket("a", request_id="first"), log)
    await settle()
    retry = spawn(q, Ticket("a", request_id="retry", exclude=frozenset({"b0"})), log)
    await settle()
    pool.open(1)
    await settle()
    assert log == ["first"] and not retry.done()
    pool.open(1)
    await settle()
    assert log == ["first", "retry"]
    assert retry.result().backend != "b0"
    for t in (first, retry):
        t.result().release(None)


async def test_a_retry_is_refused_when_only_the_backends_that_failed_it_have_room() -> None:
    q, pool, _ = make(1)
    pool.names = ("b0",)
    with pytest.raises(Rejected) as err:
        await bounded(q.admit(Ticket("a", exclude=frozenset({"b0"}))))
    assert (err.value.status, err.value.reason) == (503, "no_backend")
    assert pool.inflight == 0 and q.depth == 0


async def test_a_retry_at_the_head_without_room_anywhere_waits_and_then_goes_elsewhere() -> None:
    q, pool, _ = make(1)
    held = await q.admit(Ticket("a"))
    log: list[str] = []
    retry = spawn(q, Ticket("a", request_id="retry", exclude=frozenset({"b1"})), log)
    await settle()
    assert q.depth == 1 and not retry.done()
    held.release(None)
    await settle()
    lease = retry.result()
    assert lease.backend != "b1" and pool.inflight == 1
    lease.release(None)
