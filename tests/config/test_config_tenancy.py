"""The tenants' quota keys and the `fairness` and `usage` sections."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, parse_config

BACKENDS = ["http://127.0.0.1:8001"]


def test_defaults_price_tokens_and_leave_tenants_unlimited() -> None:
    config = parse_config({"backends": BACKENDS, "tenants": [{"name": "a", "api_keys": ["k"]}]})
    assert (config.fairness.cost, config.fairness.prompt_weight, config.fairness.output_weight) == (
        "tokens",
        1.0,
        2.0,
    )
    tenant = config.tenants[0]
    assert not tenant.has_quota
    assert config.usage.data_dir is None


def test_quotas_fairness_and_usage_are_read() -> None:
    config = parse_config(
        {
            "backends": BACKENDS,
            "tenants": [
                {"name": "a", "tokens_per_minute": 1000, "requests_per_minute": 10, "max_concurrent": 2}
            ],
            "fairness": {"cost": "requests"},
            "usage": {"data_dir": "/tmp/u", "flush_interval": 1},
        }
    )
    t = config.tenants[0]
    assert (t.tokens_per_minute, t.requests_per_minute, t.max_concurrent) == (1000, 10, 2)
    assert config.fairness.cost == "requests"
    assert config.usage.data_dir == Path("/tmp/u")


def test_problems_are_named_with_their_path() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "backends": BACKENDS,
                "tenants": [{"name": "a", "tokens_per_minute": 0, "max_concurrent": 1.5}],
                "fairness": {"cost": "dollars", "output_weight": -1},
                "usage": {"flush_interval": 0, "colour": 1},
            }
        )
    problems = info.value.problems
    assert any(p.startswith("tenants[0].tokens_per_minute: must be >= 1") for p in problems)
    assert any(p.startswith("tenants[0].max_concurrent: must be an integer") for p in problems)
    assert any(p.startswith("fairness.cost: must be one of tokens, requests") for p in problems)
    assert any(p.startswith("fairness.output_weight: must be >= 0") for p in problems)
    assert any(p.startswith("usage.flush_interval: must be > 0") for p in problems)
    assert any(p.startswith("usage.colour: unknown key") for p in problems)
