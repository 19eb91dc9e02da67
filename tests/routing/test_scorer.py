"""The bound on imbalance and the score, as arithmetic."""

from __future__ import annotations

from gateway.routing.scorer import Choice, Load, allowed, best, load_term


def load(
    name: str, inflight: int, limit: int = 10, *, open: bool | None = None, kv: float | None = None
) -> Load:
    return Load(name, inflight, limit, inflight < limit if open is None else open, kv_usage=kv)


def test_idle_pool_lets_every_backend_take_one() -> None:
    loads = [load(f"b{i}", 0) for i in range(4)]
    assert allowed(loads, 0.2) == [0, 1, 2, 3]


def test_no_backend_goes_above_one_plus_e_times_the_mean() -> None:
    # 4 x limit 20, 40 in flight after this request: mean 10, bound 1.25 x 10 = 12.5 requests.
    loads = [load("a", 12, 20), load("b", 11, 20), load("c", 9, 20), load("d", 7, 20)]
    assert allowed(loads, 0.25) == [1, 2, 3]
    assert allowed(loads, 0.35) == [0, 1, 2, 3]


def test_the_bound_is_on_the_share_of_each_limit() -> None:
    # Mean share 21/40 = 0.525 after this request, bound 0.63: a at 7/10 no, b at 15/30 yes.
    assert allowed([load("a", 6, 10), load("b", 14, 30)], 0.2) == [1]


def test_float_error_does_not_refuse_a_backend_exactly_at_the_bound() -> None:
    # c would be at 8/10 = 0.8 = 1.2 x 10/15, which floats compute as 0.7999999999999999.
    loads = [load("a", 0, 1), load("b", 2, 4), load("c", 7, 10)]
    assert 1.2 * (10 / 15) < 0.8
    assert allowed(loads, 0.2) == [1, 2]


def test_light_load_goes_to_the_least_loaded() -> None:
    # One more request is more than 20% of the mean: none is within the bound, the emptiest take it.
    assert allowed([load("a", 1), load("b", 0), load("c", 0), load("d", 1)], 0.2) == [1, 2]
    # Excluded or full backends with room elsewhere: the bound never leaves a slot idle.
    assert allowed([load("a", 9), load("b", 0, open=False)], 0.2) == [0]
    assert allowed([load("a", 10), load("b", 10)], 0.2) == []


def test_load_term_prefers_free_share_then_low_kv_usage() -> None:
    assert load_term(load("a", 2)) > load_term(load("b", 8))
    assert load_term(load("a", 5, kv=0.1)) > load_term(load("b", 5, kv=0.9))


def never(r: int, b: int) -> bool:
    return False


def test_cached_prefix_beats_a_freer_backend() -> None:
    loads = [load("a", 8), load("b", 0)]
    cached = {(0, 0): 90}
    choice = best([100], loads, [0, 1], lambda r, b: cached.get((r, b), 0), never)
    assert choice == Choice(0, 0, 90)


def test_with_nothing_cached_load_decides() -> None:
    loads = [load("a", 8), load("b", 3), load("c", 5)]
    assert best([100], loads, [0, 1, 2], lambda r, b: 0, never) == Choice(0, 1, 0)
    assert best([0], loads, [0, 1, 2], lambda r, b: 0, never) == Choice(0, 1, 0)


def test_more_cached_wins_between_backends_that_both_cache_some() -> None:
    loads = [load("a", 5), load("b", 5)]
    cached = {(0, 0): 30, (0, 1): 80}  # the system prompt on a, the whole conversation on b
    assert best([100], loads, [0, 1], lambda r, b: cached[(r, b)], never).backend == 1


def test_a_held_session_outweighs_prefix_and_load() -> None:
    loads = [load("a", 9, kv=1.0), load("b", 0)]
    cached = {(0, 1): 100}
    choice = best([100], loads, [0, 1], lambda r, b: cached.get((r, b), 0), lambda r, b: b == 0)
    assert choice is not None and choice.backend == 0


def test_late_binding_gives_the_slot_to_the_waiter_that_saves_most() -> None:
    loads = [load("a", 9)]
    cached = {(0, 0): 0, (1, 0): 10, (2, 0): 90}  # waiter 1: 10 of 10 chunks; waiter 2: 90 of 100
    choice = best([50, 10, 100], loads, [0], lambda r, b: cached[(r, b)], never)
    assert choice == Choice(2, 0, 90)


def test_late_binding_ties_keep_first_come_first_served() -> None:
    loads = [load("a", 9)]
    assert best([50, 10, 100], loads, [0], lambda r, b: 0, never) == Choice(0, 0, 0)
    assert best([], loads, [0], lambda r, b: 0, never) is None
