"""`sla.models` and `sla.queue_share`: per-model client-side targets, validated with one line each."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_config
from gateway.types import SLA

BACKENDS = {"backends": ["http://127.0.0.1:8001"]}


def test_a_models_entry_replaces_the_default_and_the_engine_gets_the_rest_of_the_budget() -> None:
    config = parse_config(
        {
            **BACKENDS,
            "sla": {
                "ttft_p90": 1.0,
                "tpot_p90": 0.05,
                "queue_share": 0.2,
                "models": {"big": {"ttft_p90": 4.0, "tpot_p90": 0.1}, "embed": {"e2e_p90": 0.5}},
            },
        }
    )
    assert config.sla_for("small") == SLA(ttft_p90=1.0, tpot_p90=0.05)
    assert config.sla_for("embed") == SLA(e2e_p90=0.5)
    # A backend serving both chat models is held to the stricter of each target, TTFT and e2e
    # less the queue's share, TPOT whole.
    engine = config.engine_sla(["big", "small"])
    assert engine.ttft_p90 == pytest.approx(0.8) and engine.tpot_p90 == 0.05 and engine.e2e_p90 is None
    assert config.engine_sla([]) == config.engine_sla(["unknown-model"])


def test_bad_entries_are_each_named() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                **BACKENDS,
                "sla": {
                    "queue_share": 1.5,
                    "models": {"a": {"ttft": 1.0}, "b": 3, "c": {}, "d": {"tpot_p90": -1}},
                },
            }
        )
    text = str(err.value)
    for problem in (
        "sla.queue_share: must be <= 0.9",
        "sla.models.a.ttft: unknown key",
        "sla.models.b: must be a mapping of targets",
        "sla.models.c: names no target",
        "sla.models.d.tpot_p90: must be > 0",
    ):
        assert problem in text, text
