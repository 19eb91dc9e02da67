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


TIERED = {
    **BACKENDS,
    "sla": {
        "ttft_p90": 1.0,
        "tpot_p90": 0.05,
        "models": {"big": {"ttft_p90": 4.0, "tpot_p90": 0.1}, "embed": {"e2e_p90": 0.5}},
    },
    "tenants": [
        {"name": "premium", "api_keys": ["p"], "sla": {"ttft_p90": 0.5}},
        {"name": "standard", "api_keys": ["s"]},
    ],
}


def test_a_tenants_targets_replace_the_models_signal_by_signal() -> None:
    config = parse_config(TIERED)
    assert config.tenants[0].sla == SLA(ttft_p90=0.5) and config.tenants[1].sla is None
    # Its TTFT replaces the model's; the TPOT it does not name stays the model's.
    assert config.sla_for("big", "premium") == SLA(ttft_p90=0.5, tpot_p90=0.1)
    assert config.sla_for("small", "premium") == SLA(ttft_p90=0.5, tpot_p90=0.05)
    # A target the model has none for becomes one for this tenant's requests.
    assert config.sla_for("embed", "premium") == SLA(ttft_p90=0.5, e2e_p90=0.5)
    # A tenant without targets of its own, an unknown one, or none: the model's SLA.
    for tenant in ("standard", "nobody", None):
        assert config.sla_for("big", tenant) == SLA(ttft_p90=4.0, tpot_p90=0.1)


def test_a_tenants_tighter_target_tightens_the_engine_target_of_every_backend() -> None:
    config = parse_config(TIERED)
    plain = parse_config({**TIERED, "tenants": [{"name": "standard", "api_keys": ["s"]}]})
    assert plain.engine_sla(["big"]) == SLA(ttft_p90=3.0, tpot_p90=0.1)
    # Premium's 0.5 s TTFT over big's SLA, less the queue's share (0.25).
    assert config.engine_sla(["big"]) == SLA(ttft_p90=pytest.approx(0.375), tpot_p90=0.1)
    assert config.engine_sla(["embed"]) == SLA(ttft_p90=pytest.approx(0.375), e2e_p90=pytest.approx(0.375))
    # No model known yet: the default's SLA, and each tenant's over it.
    assert config.engine_sla([]) == SLA(ttft_p90=pytest.approx(0.375), tpot_p90=0.05)


def test_a_tenants_sla_entries_are_each_named() -> None:
    tenants = [
        {"name": "a", "sla": {"ttft": 1.0}},
        {"name": "b", "sla": 3},
        {"name": "c", "sla": {}},
        {"name": "d", "sla": {"tpot_p90": -1}},
        {"name": "e", "sla": {"e2e_p90": 0}},
    ]
    with pytest.raises(ConfigError) as err:
        parse_config({**BACKENDS, "tenants": tenants})
    text = str(err.value)
    for problem in (
        "tenants[0].sla.ttft: unknown key (allowed: e2e_p90, tpot_p90, ttft_p90)",
        "tenants[1].sla: must be a mapping of targets (ttft_p90, tpot_p90, e2e_p90)",
        "tenants[2].sla: names no target (give one of ttft_p90, tpot_p90, e2e_p90)",
        "tenants[3].sla.tpot_p90: must be > 0",
        "tenants[4].sla.e2e_p90: must be > 0",
    ):
        assert problem in text, text
