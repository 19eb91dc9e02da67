"""The listener limits and the admin section of the config."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_config
from gateway.config.listen import AdminConfig, ListenLimits

BACKENDS = ["http://127.0.0.1:8001"]


def test_defaults() -> None:
    config = parse_config({"backends": BACKENDS})
    assert config.limits == ListenLimits()
    assert config.admin == AdminConfig(api_key=None, host="127.0.0.1", port=None)


def test_limits_and_an_admin_listener_with_its_key_from_the_environment() -> None:
    config = parse_config(
        {
            "backends": BACKENDS,
            "listen": {
                "port": 8080,
                "header_timeout": 2,
                "body_timeout": 5,
                "max_connections": 100,
                "max_header_bytes": 4096,
            },
            "admin": {"api_key_env": "ADMIN_KEY", "port": 9090},
        },
        env={"ADMIN_KEY": "s3cret"},
    )
    assert config.limits.header_timeout == 2.0 and config.limits.max_connections == 100
    assert config.limits.body_timeout == 5.0 and config.limits.body_min_rate == 64 * 1024
    assert config.limits.max_header_bytes == 4096 and config.limits.write_timeout == 30.0
    assert config.admin == AdminConfig(api_key="s3cret", host="127.0.0.1", port=9090)


def test_every_problem_is_named() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "backends": BACKENDS,
                "listen": {
                    "port": 8080,
                    "write_timeout": 0,
                    "body_min_rate": 0,
                    "max_header_bytes": 100,
                    "backlog": 5,
                },
                "admin": {"port": 8080, "probe_port": 8080, "api_key_env": "UNSET_ADMIN_KEY", "colour": 1},
            },
            env={},
        )
    problems = "\n".join(info.value.problems)
    for expected in (
        "listen.write_timeout: must be > 0",
        "listen.body_min_rate: must be >= 1",
        "listen.max_header_bytes: must be >= 1024",
        "listen.backlog: unknown key",
        "admin.port: must differ from listen.port (8080)",
        "admin.probe_port: must differ from listen.port (8080)",
        "admin.api_key_env: environment variable 'UNSET_ADMIN_KEY' is not set",
        "admin.colour: unknown key",
    ):
        assert expected in problems
