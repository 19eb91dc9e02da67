"""The pool's choice of a backend, with a hand-driven clock and real limiters."""

from gateway import routing
from gateway.pool.pool import Pool
from gateway.routing import RouteKey
from tests.clock import FakeClock
from tests.pool.pool_helpers import take
from tests.pool.test_backends import make


def test_picks_the_backend_with_the_largest_free_share_and_respects_limits() -> None:
    clock = FakeClock(100.0)
    a, b = make(clock, "a", 4), make(clock, "b", 2)
    pool = Pool([a, b], clock)
    leases = [take(pool, "m") for _ in range(6)]
    assert all(lease is not None for lease in leases)
    assert (a.limiter.inflight, b.limiter.inflight) == (4, 2)
    assert take(pool, "m") is None
    assert pool.all_busy("m")
    leases[0].release(None)  # type: ignore[union-attr]
    again = take(pool, "m")
    assert again is not None and again.backend == leases[0].backend  # type: ignore[union-attr]


def test_only_backends_serving_the_model_are_used() -> None:
    clock = FakeClock(100.0)
    a, b = make(clock, "a", 4, ("x",)), make(clock, "b", 4, ("y",))
    pool = Pool([a, b], clock)
    lease = take(pool, "y")
    assert lease is not None and lease.backend == "b"
    assert take(pool, "z") is None
    assert pool.known("x") and not pool.known("z")
    assert pool.models() == ["x", "y"]


def test_the_pool_routes_by_the_strategy_it_is_given() -> None:
    clock = FakeClock(100.0)
    a, b = make(clock, "a", 4), make(clock, "b", 4)
    pool = Pool([a, b], clock, routing.create("prefix"))
    doc = RouteKey(prompt="d" * 2000 + "first question")
    first = take(pool, "m", doc)
    assert first is not None
    first.release(None)
    for question in ("second", "third"):
        lease = take(pool, "m", RouteKey(prompt="d" * 2000 + question))
        assert lease is not None and lease.backend == first.backend
        lease.release(None)
    # A failed backend is excluded on retry even though it holds the prefix.
    other = take(pool, "m", doc, exclude=[first.backend])
    assert other is not None and other.backend != first.backend
    # Late binding: of several requests, the one whose prefix the free backend holds.
    held = [take(pool, "m") for _ in range(4)]
    free = next(x for x in held if x is not None and x.target is first.target)
    free.release(None)
    got = pool.pick("m", [RouteKey(prompt="e" * 3000), None, RouteKey(prompt="d" * 2000 + "fourth")])
    assert got is not None and got[0] == 2 and got[1].backend == first.backend
