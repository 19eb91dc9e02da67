from __future__ import annotations

from argparse import Namespace
from typing import Any

import pytest

from loadtests.shapes import Ramp, Spike, Steady, Step, build_schedule, doubling_levels


def options(**kw: Any) -> Namespace:
    base: dict[str, Any] = {"num_users": 8, "spawn_rate": 2, "run_time": 60}
    base.update(kw)
    return Namespace(**base)


def test_steady_holds_users_until_the_run_time() -> None:
    s = build_schedule(options(shape="steady"))
    assert isinstance(s, Steady)
    assert s.at(0) == (8, 2) and s.at(59.9) == (8, 2) and s.at(60) is None


def test_steady_without_run_time_never_ends() -> None:
    assert build_schedule(options(shape=None, run_time=None)).at(1e9) == (8, 2)


def test_step_doubles_up_to_the_user_count_by_default() -> None:
    assert doubling_levels(20) == (1, 2, 4, 8, 16, 20)
    assert doubling_levels(1) == (1,)
    s = build_schedule(options(shape="step", num_users=32, step_time=10))
    assert isinstance(s, Step) and s.levels == (1, 2, 4, 8, 16, 32)
    assert [s.at(t)[0] for t in (0, 9.9, 10, 25, 59.9)] == [1, 1, 2, 4, 32]  # type: ignore[index]
    assert s.at(60) is None


def test_step_reaches_each_level_within_a_second() -> None:
    s = build_schedule(options(shape="step", step_levels="4, 20,50", step_time="5"))
    assert s.at(0) == (4, 4.0)
    assert s.at(5) == (20, 16.0)
    assert s.at(10) == (50, 30.0)


def test_spike_jumps_and_returns() -> None:
    s = build_schedule(options(shape="spike", spike_users=40, spike_at=10, spike_duration=5))
    assert isinstance(s, Spike)
    assert s.at(9.9) == (8, 40.0)
    assert s.at(10) == (40, 40.0) and s.at(14.9) == (40, 40.0)
    assert s.at(15) == (8, 40.0)
    assert s.at(60) is None


def test_spike_defaults_follow_the_run_time() -> None:
    s = build_schedule(options(shape="spike"))
    assert s == Spike(8, 32, 20.0, 10.0, 60.0)


def test_ramp_rises_linearly_then_holds() -> None:
    s = build_schedule(options(shape="ramp", num_users=11, ramp_time=10))
    assert isinstance(s, Ramp)
    users = [s.at(t)[0] for t in range(0, 12)]  # type: ignore[index]
    assert users == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 11]
    assert s.at(60) is None


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"shape": "wave"}, "--shape must be one of"),
        ({"shape": "spike", "run_time": None}, "needs a run time"),
        ({"shape": "step", "step_levels": "1,x"}, "--step-levels must be integers"),
        ({"shape": "step", "step_time": 0}, "--step-time > 0"),
        ({"shape": "ramp", "ramp_time": "soon"}, "--ramp-time must be a number"),
    ],
)
def test_bad_shape_options_name_the_option(kw: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        build_schedule(options(**kw))
