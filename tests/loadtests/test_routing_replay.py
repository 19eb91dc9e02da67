"""The routing benchmark in virtual time: deterministic, and it shows what a small KV cache does."""

from loadtests.routing.replay import Setup, replay

SMALL = Setup(users=60, warmup=15.0, window=20.0)


def test_the_same_seed_gives_the_same_numbers() -> None:
    first = replay("docs", "prefix", 2048, seed=4, setup=SMALL)
    assert replay("docs", "prefix", 2048, seed=4, setup=SMALL) == first


def test_prefix_routing_keeps_documents_cached_where_least_loaded_spreads_them() -> None:
    prefix = replay("docs", "prefix", 2048, seed=1, setup=SMALL)
    spread = replay("docs", "least_loaded", 2048, seed=1, setup=SMALL)
    assert prefix.hit_rate is not None and spread.hit_rate is not None
    assert prefix.hit_rate > 2 * spread.hit_rate
    assert prefix.rps > spread.rps


def test_nothing_shared_nothing_cached() -> None:
    out = replay("distinct", "prefix", 2048, seed=1, setup=SMALL)
    assert out.hit_rate == 0.0
    assert out.rps > 0
