"""The prefix strategy: learns where prompts went, follows them, keeps sessions, spreads hot prefixes."""

from __future__ import annotations

from collections import Counter

from gateway.routing.key import CHUNK_CHARS, RouteKey
from gateway.routing.prefix import PrefixAffinity
from gateway.routing.scorer import Choice, Load

DOC = "d" * (CHUNK_CHARS * 8)


def key(text: str, session: str | None = None) -> RouteKey:
    return RouteKey(prompt=text, session=session)


class Pool:
    """Four backends with limits; `send` routes one request and holds its slot."""

    def __init__(self, strategy: PrefixAffinity, n: int = 4, limit: int = 10) -> None:
        self.strategy = strategy
        self.inflight = [0] * n
        self.limit = limit
        self.epochs = [0] * n

    def loads(self) -> list[Load]:
        return [
            Load(f"b{i}", n, self.limit, n < self.limit, epoch=self.epochs[i])
            for i, n in enumerate(self.inflight)
        ]

    def send(self, route: RouteKey) -> Choice:
        loads = self.loads()
        choice = self.strategy.choose("m", [route], loads)
        assert choice is not None
        self.inflight[choice.backend] += 1
        self.strategy.routed("m", route, loads[choice.backend], choice)
        return choice


def test_a_prompt_follows_its_prefix_and_counts_the_hit() -> None:
    pool = Pool(PrefixAffinity())
    first = pool.send(key(DOC + "question one"))
    pool.inflight[first.backend] -= 1
    second = pool.send(key(DOC + "another question"))
    assert second.backend == first.backend and second.matched == 8
    report = pool.strategy.report(f"b{first.backend}", 0)
    assert report.queried == 16 and report.hits == 8 and report.chunks == 8


def test_unrelated_prompts_spread_by_load() -> None:
    pool = Pool(PrefixAffinity())
    backends = [pool.send(key(chr(65 + i) * CHUNK_CHARS * 2)).backend for i in range(8)]
    assert sorted(Counter(backends).values()) == [2, 2, 2, 2]


def test_a_hot_prefix_spills_over_within_the_bound() -> None:
    pool = Pool(PrefixAffinity(imbalance=0.25), limit=20)
    for i in range(40):
        before = min(pool.inflight)
        pool.send(key(DOC + f"question {i}"))
        assert max(pool.inflight) <= max(1.25 * sum(pool.inflight) / 4, before + 1)
    assert sorted(pool.inflight) == [10, 10, 10, 10]


def test_a_session_stays_on_its_backend_while_it_is_allowed() -> None:
    pool = Pool(PrefixAffinity())
    home = pool.send(key("short", session="s1")).backend
    pool.inflight = [1, 1, 1, 1]
    assert pool.send(key("another short prompt", session="s1")).backend == home
    # Its backend full: the session moves, and stays where it moved.
    pool.inflight = [0, 0, 0, 0]
    pool.inflight[home] = pool.limit
    moved = pool.send(key("third", session="s1")).backend
    assert moved != home
    pool.inflight = [0, 0, 0, 0]  # the turn ended
    assert pool.send(key("fourth", session="s1")).backend == moved


def test_sessions_are_per_model() -> None:
    strategy = PrefixAffinity()
    loads = [Load("b0", 0, 10, True), Load("b1", 0, 10, True)]
    strategy.routed("m", key("x", session="s"), loads[1], Choice(0, 1))
    assert strategy.choose("m", [key("y", session="s")], loads) == Choice(0, 1, 0)
    assert strategy.choose("other", [key("y", session="s")], loads) == Choice(0, 0, 0)


def test_one_tenants_prompts_and_sessions_do_not_steer_anothers() -> None:
    strategy = PrefixAffinity()
    loads = [Load("b0", 0, 10, True), Load("b1", 0, 10, True)]

    def tenant_key(tenant: str) -> RouteKey:
        return RouteKey.from_body({"prompt": DOC, "user": "s"}, tenant=tenant)

    strategy.routed("m", tenant_key("a"), loads[1], Choice(0, 1, 0))
    assert strategy.choose("m", [tenant_key("a")], loads) == Choice(0, 1, len(tenant_key("a").chunks))
    assert strategy.choose("m", [tenant_key("b")], loads) == Choice(0, 0, 0)


def test_a_restarted_backend_is_forgotten() -> None:
    pool = Pool(PrefixAffinity())
    home = pool.send(key(DOC + "q")).backend
    pool.inflight[home] = 0
    pool.epochs[home] += 1  # restarted or ejected: its cache is gone
    again = pool.send(key(DOC + "q"))
    assert again.matched == 0
    assert pool.strategy.report(f"b{home}", pool.epochs[home]).chunks == (8 if again.backend == home else 0)


def test_late_binding_picks_the_waiter_whose_prefix_the_free_backend_holds() -> None:
    strategy = PrefixAffinity()
    loads = [Load("b0", 0, 10, True), Load("b1", 0, 10, True)]
    strategy.routed("m", key(DOC + "x"), loads[1], Choice(0, 1))
    full_b0 = [Load("b0", 10, 10, False), Load("b1", 9, 10, True)]
    waiters = [key("e" * CHUNK_CHARS * 4), key("f" * 30), key(DOC + "y")]
    assert strategy.choose("m", waiters, full_b0) == Choice(2, 1, 8)
