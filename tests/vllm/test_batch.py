"""A 500-line batch through the gateway's Batch API to the real vLLM engine, with the OpenAI SDK."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
from openai import OpenAI
from real_engine import Gateway

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

LINES = 500


def test_a_500_line_batch_completes_on_the_real_engine(start_gateway, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    gateway: Gateway = start_gateway("--sla-ttft-p90", "1.0", "--data-dir", str(tmp_path / "data"))
    client = OpenAI(base_url=gateway.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = gateway.engine.model
    lines = [
        {
            "custom_id": f"item-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": model,
                "messages": [{"role": "user", "content": f"Rate item {i} from 1 to 10."}],
                "max_tokens": 16,
                "ignore_eos": True,
            },
        }
        for i in range(LINES)
    ]
    data = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    file = client.files.create(file=("items.jsonl", data), purpose="batch")
    batch = client.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    started = time.monotonic()
    while batch.status not in ("completed", "failed", "cancelled", "expired"):
        assert time.monotonic() - started < 600, f"batch still {batch.status}: {batch.request_counts}"
        time.sleep(0.5)
        batch = client.batches.retrieve(batch.id)
    seconds = time.monotonic() - started
    assert batch.status == "completed" and batch.request_counts is not None
    assert (batch.request_counts.completed, batch.request_counts.failed) == (LINES, 0)
    assert batch.output_file_id is not None and batch.error_file_id is None
    out = [orjson.loads(line) for line in client.files.content(batch.output_file_id).content.splitlines()]
    assert Counter(line["custom_id"] for line in out) == Counter(f"item-{i}" for i in range(LINES))
    assert all(line["response"]["body"]["usage"]["completion_tokens"] == 16 for line in out)
    assert batch.usage is not None and batch.usage.output_tokens == 16 * LINES
    rate = batch.usage.total_tokens / seconds
    print(f"{LINES} lines in {seconds:.1f} s: {rate:.0f} tok/s (prompt + completion)")
