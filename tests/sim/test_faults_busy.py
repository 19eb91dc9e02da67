"""The simulator's engine-busy fault: vLLM 0.32's `--max-num-queued-reqs`, set at start or at run time."""

from __future__ import annotations

import pytest

from gateway.sim.faults import Faults


def test_the_cap_is_set_at_run_time_and_reset_with_the_rest() -> None:
    capped = Faults().updated({"max_num_queued_reqs": 3})
    assert capped.max_num_queued_reqs == 3 and not capped.normal
    assert capped.updated({"reset": True}).max_num_queued_reqs == 0


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3"])
def test_a_cap_that_is_not_a_count_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="max_num_queued_reqs"):
        Faults().updated({"max_num_queued_reqs": bad})
