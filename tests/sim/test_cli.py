"""`llm-gateway sim` as a process: flags override the profile and set faults at start."""

from __future__ import annotations

import sys

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.procs import free_port, spawn, spawn_sim


def test_flags_override_profile_parameters() -> None:
    args = ("--profile", "instant", "--model", "m1", "--num-gpu-blocks", "100", "--block-size", "32")
    with spawn_sim(*args, "--max-model-len", "2048", "--max-num-seqs", "7") as sim:
        models = httpx.get(f"{sim.url}/v1/models").json()["data"]
        assert models[0]["id"] == "m1" and models[0]["max_model_len"] == 2048
        text = httpx.get(f"{sim.url}/metrics").text
        info = next(
            f for f in text_string_to_metric_families(text) if f.name == "vllm:cache_config_info"
        ).samples[0]
        assert info.labels["num_gpu_blocks"] == "100" and info.labels["block_size"] == "32"
        done = httpx.post(
            f"{sim.url}/v1/completions",
            json={"model": "m1", "prompt": "hi", "max_tokens": 3, "ignore_eos": True},
        ).json()
        assert done["usage"]["completion_tokens"] == 3
    assert not sim.alive()


def test_die_flag_starts_dead_and_admin_route_revives() -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "gateway.cli", "sim", "--port", str(port), "--die"]
    with spawn(cmd, f"{base}/sim/faults", base_url=base) as sim:
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            httpx.get(f"{sim.url}/health")
        assert httpx.get(f"{sim.url}/sim/faults").json()["die"] is True
        httpx.post(f"{sim.url}/sim/faults", json={"reset": True})
        assert httpx.get(f"{sim.url}/health").status_code == 200


def test_bad_override_exits_with_status_2() -> None:
    with pytest.raises(RuntimeError, match="exited with 2"):
        spawn_sim("--num-gpu-blocks", "0", timeout=10)


def test_every_flag_has_help_text() -> None:
    import argparse

    from gateway.sim.cli import configure_parser

    parser = argparse.ArgumentParser()
    configure_parser(parser)
    missing = [a.dest for a in parser._actions if not a.help]
    assert missing == []
    assert len(parser._actions) > 30
