"""The `batch` section and per-tenant queue deadlines of the config."""

from pathlib import Path

import pytest

from gateway.config import ConfigError, parse_config


def test_the_batch_api_is_off_unless_a_data_dir_is_given() -> None:
    config = parse_config({"backends": ["http://a:1"]})
    assert not config.batch.enabled
    assert config.batch.max_file_bytes == 200 * 1024 * 1024 and config.batch.max_lines == 50_000
    on = parse_config({"backends": ["http://a:1"], "batch": {"data_dir": "~/gw", "max_attempts": 2}})
    assert on.batch.enabled and on.batch.data_dir == Path("~/gw").expanduser()
    assert on.batch.max_attempts == 2


def test_batch_problems_are_reported_with_their_path() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "backends": ["http://a:1"],
                "batch": {"data_dir": 3, "max_lines": 0, "interactive_horizon": 0, "colour": 1},
            }
        )
    problems = info.value.problems
    assert any(p.startswith("batch.data_dir: must be a directory path") for p in problems)
    assert any(p.startswith("batch.max_lines: must be >= 1") for p in problems)
    assert any(p.startswith("batch.interactive_horizon: must be > 0") for p in problems)
    assert any(p.startswith("batch.colour: unknown key") for p in problems)


def test_a_tenant_may_have_its_own_queue_deadline() -> None:
    tenants = [{"name": "bulk", "api_keys": ["k"], "queue_timeout": 600}, {"name": "chat", "api_keys": ["c"]}]
    config = parse_config({"backends": ["http://a:1"], "tenants": tenants})
    assert [t.queue_timeout for t in config.tenants] == [600.0, None]
    with pytest.raises(ConfigError) as info:
        parse_config({"backends": ["http://a:1"], "tenants": [{"name": "x", "queue_timeout": -1}]})
    assert any(p.startswith("tenants[0].queue_timeout: must be > 0") for p in info.value.problems)
