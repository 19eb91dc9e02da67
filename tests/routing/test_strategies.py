"""The baseline strategies and the factory."""

from __future__ import annotations

import pytest

from gateway.routing import STRATEGIES, Choice, Load, create
from gateway.routing.strategies import LeastLoaded, RoundRobin


def loads(*inflight: int, limit: int = 4) -> list[Load]:
    return [Load(f"b{i}", n, limit, n < limit) for i, n in enumerate(inflight)]


def test_round_robin_takes_turns_and_skips_full_backends() -> None:
    rr = RoundRobin()
    picks = [rr.choose("m", [None], loads(0, 0, 0)) for _ in range(4)]
    assert [c.backend for c in picks if c] == [0, 1, 2, 0]
    assert rr.choose("m", [None], loads(0, 4, 0)) == Choice(0, 2)
    assert rr.choose("m", [None], loads(4, 4, 4)) is None


def test_least_loaded_takes_the_largest_free_share() -> None:
    ll = LeastLoaded()
    mixed = [Load("slow", 1, 2, True), Load("fast", 4, 16, True)]  # free 1/2 vs 12/16
    assert ll.choose("m", [None, None], mixed) == Choice(0, 1)
    assert ll.choose("m", [None], loads(4, 4)) is None


def test_create_by_name() -> None:
    assert [create(name).name for name in STRATEGIES] == list(STRATEGIES)
    with pytest.raises(ValueError, match="unknown routing strategy"):
        create("random")
