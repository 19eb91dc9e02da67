import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_example_is_valid() -> None:
    config = load_config(ROOT / "config" / "gateway.yaml")
    assert [b.name for b in config.backends] == ["gpu-0", "gpu-1"]
    assert config.sla.targets() == {"ttft": 1.0, "tpot": 0.05}


def test_plain_urls_and_defaults() -> None:
    config = parse_config({"backends": ["http://127.0.0.1:8001/"]})
    assert config.backends[0].url == "http://127.0.0.1:8001"
    assert config.backends[0].name == "127.0.0.1:8001"
    assert config.port == 8080
    assert config.sla.targets() == {"ttft": 1.0}
    assert config.max_body_bytes == 16 * 1024 * 1024


def test_every_problem_is_reported_with_its_path() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "backends": [{"url": "ftp://x"}, {"url": "http://a:1", "max_concurrency": 0}],
                "queue": {"timeout": -1},
                "sla": {"ttft_p90": "fast"},
                "controller": {"algorithm": "magic"},
                "colour": "blue",
            }
        )
    problems = info.value.problems
    assert any(p.startswith("backends[0].url: must be an http(s) URL") for p in problems)
    assert any(p.startswith("backends[1].max_concurrency: must be >= 1") for p in problems)
    assert any(p.startswith("queue.timeout: must be > 0") for p in problems)
    assert any(p.startswith("sla.ttft_p90: must be a number") for p in problems)
    assert any(p.startswith("controller:") and "magic" in p for p in problems)
    assert any(p.startswith("colour: unknown key") for p in problems)


def test_secrets_come_from_the_environment() -> None:
    data = {
        "backends": [{"url": "http://a:1", "api_key_env": "K"}],
        "tenants": [{"name": "t", "api_keys_env": ["T"]}],
    }
    config = parse_config(data, env={"K": "backend-secret", "T": "tenant-key"})
    assert config.backends[0].api_key == "backend-secret"
    assert config.tenants[0].api_keys == ("tenant-key",)
    with pytest.raises(ConfigError) as info:
        parse_config(data, env={})
    assert len(info.value.problems) == 2


def test_same_key_for_two_tenants_is_refused() -> None:
    with pytest.raises(ConfigError, match="given to both"):
        parse_config(
            {
                "backends": ["http://a:1"],
                "tenants": [{"name": "a", "api_keys": ["k"]}, {"name": "b", "api_keys": ["k"]}],
            }
        )


def test_check_config_cli_prints_one_line_per_problem_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("backends: [notaurl]\nqueue: {max_depth: -3}\n")
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "check-config", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2
    assert all(line.startswith(str(bad)) for line in lines)
    good = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "check-config", str(ROOT / "config" / "gateway.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert good.returncode == 0, good.stdout + good.stderr


def test_state_is_off_by_default_and_takes_a_redis_url_from_the_file_or_the_environment() -> None:
    assert parse_config({"backends": ["http://a:1"]}).state.redis_url is None
    state = parse_config(
        {
            "backends": ["http://a:1"],
            "state": {"redis_url_env": "R", "lease_seconds": 6, "namespace": "prod"},
        },
        env={"R": "rediss+sentinel://:pw@s1,s2/mymaster"},
    ).state
    assert (state.redis_url, state.lease_seconds, state.namespace, state.timeout) == (
        "rediss+sentinel://:pw@s1,s2/mymaster",
        6.0,
        "prod",
        0.5,
    )


def test_state_problems_are_named() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "backends": ["http://a:1"],
                "state": {"redis_url": "http://r:6379", "lease_seconds": 1, "namespace": "{x}", "pool": 3},
            }
        )
    problems = info.value.problems
    assert any(p.startswith("state.redis_url: unknown scheme 'http'") for p in problems)
    assert "state.timeout: must be below lease_seconds / 3 (0.333333), got 0.5" in problems
    assert any(p.startswith("state.namespace: must be a non-empty name without braces") for p in problems)
    assert any(p.startswith("state.pool: unknown key") for p in problems)


def test_routing_defaults_and_problems() -> None:
    routing = parse_config({"backends": ["http://a:1"]}).routing
    assert (routing.strategy, routing.max_imbalance, routing.lookahead) == ("prefix", 0.2, 16)
    chosen = parse_config({"backends": ["http://a:1"], "routing": {"strategy": "round_robin"}}).routing
    assert chosen.strategy == "round_robin"
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "backends": ["http://a:1"],
                "routing": {"strategy": "random", "max_imbalance": -1, "lookahead": 0, "chunk": 3},
            }
        )
    problems = info.value.problems
    assert any(
        p.startswith("routing.strategy: must be one of prefix, least_loaded, round_robin") for p in problems
    )
    assert any(p.startswith("routing.max_imbalance: must be >= 0") for p in problems)
    assert any(p.startswith("routing.lookahead: must be >= 1") for p in problems)
    assert any(p.startswith("routing.chunk: unknown key") for p in problems)


def test_a_backend_url_ending_in_v1_is_refused_with_the_root_to_give_instead() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"backends": ["http://gpu-0:8000/v1", {"url": "https://gpu-1/vllm/v1/"}]})
    assert info.value.problems == [
        "backends[0].url: 'http://gpu-0:8000/v1' ends in /v1; give the server's root, "
        "'http://gpu-0:8000' (the gateway adds /v1 itself)",
        "backends[1].url: 'https://gpu-1/vllm/v1/' ends in /v1; give the server's root, "
        "'https://gpu-1/vllm' (the gateway adds /v1 itself)",
    ]
    # A path that is a prefix (a server behind a reverse proxy) is the server's root.
    assert parse_config({"backends": ["http://proxy/vllm-v1"]}).backends[0].url == "http://proxy/vllm-v1"


def test_check_config_names_the_v1_url_to_fix(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("backends:\n  - http://127.0.0.1:8000/v1\n")
    result = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "give the server's root, 'http://127.0.0.1:8000'" in result.stdout


def test_answers_name_their_backend_only_without_tenants_unless_configured() -> None:
    base: dict[str, object] = {"backends": [{"url": "http://a:1"}]}
    tenants = {**base, "tenants": [{"name": "t", "api_keys": ["k"]}]}
    assert parse_config(base).exposes_backend() and not parse_config(tenants).exposes_backend()
    assert parse_config({**tenants, "headers": {"expose_backend": True}}).exposes_backend()
    with pytest.raises(ConfigError):
        parse_config({**base, "headers": {"expose_backend": "yes"}})
