"""Batch lines are charged to their batch's tenant like any request: usage, counters, quota."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import openai
import orjson

from tests.batch.jsonl import CHAT, chat_line, jsonl
from tests.procs import spawn_gateway, spawn_sim
from tests.tenancy.helpers import metric


def test_batch_lines_count_in_usage_and_in_the_tenants_quota(tmp_path: Path) -> None:
    with spawn_sim("--profile", "instant", "--model", "m") as sim:
        config = {
            "backends": [{"url": sim.url, "name": "sim"}],
            # Three requests a minute: the ten batch lines are never refused for it, but they
            # spend it, so the next interactive request of the tenant waits.
            "tenants": [{"name": "team", "api_keys": ["key-t"], "requests_per_minute": 3}],
            "batch": {"data_dir": str(tmp_path)},
        }
        with spawn_gateway(config, ready="/health") as gw:
            c = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="key-t", max_retries=0)
            data = jsonl(*(chat_line(f"q{i}", model="m", max_tokens=3 + i) for i in range(10)))
            file = c.files.create(file=("in.jsonl", data), purpose="batch")
            batch = c.batches.create(input_file_id=file.id, endpoint=CHAT, completion_window="24h")
            deadline = time.monotonic() + 60
            while (batch := c.batches.retrieve(batch.id)).status not in ("completed", "failed"):
                assert time.monotonic() < deadline, batch.status
                time.sleep(0.1)
            assert batch.status == "completed" and batch.output_file_id is not None
            lines = [orjson.loads(x) for x in c.files.content(batch.output_file_id).content.splitlines()]
            usage = [line["response"]["body"]["usage"] for line in lines]
            assert len(usage) == 10
            prompt = sum(u["prompt_tokens"] for u in usage)
            output = sum(u["completion_tokens"] for u in usage)
            assert metric(gw.url, "gateway_tenant_tokens_total", tenant="team", kind="prompt") == prompt
            assert metric(gw.url, "gateway_tenant_tokens_total", tenant="team", kind="output") == output
            assert metric(gw.url, "gateway_tenant_requests_total", tenant="team") == 10
            report = httpx.get(f"{gw.url}/admin/usage", params={"start": 0}).json()
            assert report["data"][0]["output_tokens"] == output
            refused = httpx.post(
                f"{gw.url}/v1/chat/completions",
                headers={"authorization": "Bearer key-t"},
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            )
            assert refused.status_code == 429
            assert refused.json()["error"]["code"] == "rate_limit_exceeded"
