from __future__ import annotations

import pytest
from limits_helpers import engine_stats, make_obs

from gateway.control.algorithms import DEFAULT, NAMES, REASONS, create
from gateway.types import SLA


def test_every_name_builds() -> None:
    assert DEFAULT == "sla" and set(NAMES) == {"sla", "goodput", "aimd", "gradient", "fixed"}
    for name in NAMES:
        params: dict[str, object] = {"limit": 4} if name == "fixed" else {}
        assert create(name, params, SLA(ttft_p90=1.0)).name == name


def test_unknown_name() -> None:
    with pytest.raises(ValueError, match="unknown limit algorithm 'pid'"):
        create("pid", {}, SLA())


def test_fixed_requires_limit_and_holds_it() -> None:
    with pytest.raises(ValueError, match="'limit' is required"):
        create("fixed", {}, SLA())
    with pytest.raises(ValueError, match="'limit' must be >= 1"):
        create("fixed", {"limit": 0}, SLA())
    a = create("fixed", {"limit": 24}, SLA(ttft_p90=0.1))
    assert not a.respects_kv_ceiling
    assert a.initial_limit(1, 256) == 24
    d = a.update(make_obs(limit=24, p90={"ttft": 9.0}, preemptions_delta=10))
    assert (d.limit, d.reason) == (24, "fixed")


def test_reasons_are_a_closed_set() -> None:
    """Every reason any algorithm produces over a spread of situations is in REASONS."""
    seen: set[str] = set()
    sla = SLA(ttft_p90=1.0)
    for name in NAMES:
        algo = create(name, {"limit": 8} if name == "fixed" else {}, sla)
        for i, ttft in enumerate((0.1, 0.6, 0.9, 1.5, 5.0)):
            for kw in (
                {},
                {"preemptions_delta": 2},
                {"sample_count": 0},
                {"peak_inflight": 1},
                {"ceiling": 4},
                {"limit": 64, "ceiling": 64},
                {"engine_stats": engine_stats(kv_usage=0.99, waiting=4, running=9)},
                {"engine_stats": engine_stats(kv_usage=0.99, waiting=0, running=9)},
                {"engine_stats": engine_stats(kv_usage=0.4, waiting=4, running=9)},
            ):
                o = make_obs(now=100.0 * i, p90={"ttft": ttft}, p90_e2e_per_token=ttft / 50, **kw)
                seen.add(algo.update(o).reason)
    assert seen <= set(REASONS)
    assert {"p90_over_target", "preemptions", "headroom", "steady"} <= seen
