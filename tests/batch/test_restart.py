"""A gateway killed with SIGKILL halfway through a batch, started again: the batch resumes and
finishes with every custom_id exactly once, and lines committed before the kill do not run again."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import openai
import orjson

from tests.batch.jsonl import CHAT, chat_line, jsonl
from tests.procs import Proc, spawn_gateway, spawn_sim

LINES = 200


def metric_sum(proc: Proc, prefix: str) -> float:
    """The sum of every series of one metric family that `proc` exports."""
    text = httpx.get(f"{proc.url}/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix + "{"))


def kill(gw: Proc) -> None:
    os.kill(gw.pid, signal.SIGKILL)
    gw.popen.wait(10)
    gw.stop()  # closes its log; the process is gone already


def test_sigkill_halfway_then_restart_answers_every_line_once(tmp_path: Path) -> None:
    with spawn_sim("--profile", "tiny-cpu", "--seed", "5") as sim:
        config = {"backends": [sim.url], "batch": {"data_dir": str(tmp_path / "data")}}
        gw = spawn_gateway(config)
        try:
            c = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
            data = jsonl(*(chat_line(f"id-{i}", max_tokens=16, ignore_eos=True) for i in range(LINES)))
            file_id = c.files.create(file=("in.jsonl", data), purpose="batch").id
            batch_id = c.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h").id
            deadline = time.monotonic() + 60
            while (
                counts := c.batches.retrieve(batch_id).request_counts
            ) is None or counts.completed < LINES // 2:
                assert time.monotonic() < deadline, "the batch did not get halfway"
                time.sleep(0.02)
            backend = httpx.get(f"{gw.url}/admin/state").json()["backends"][0]
            kill(gw)
            in_flight = max(backend["controlled"], backend["inflight"])  # batch lines take no burst room
        finally:
            gw.stop()
        with spawn_gateway(config) as again:
            c = openai.OpenAI(base_url=f"{again.url}/v1", api_key="k", max_retries=0)
            deadline = time.monotonic() + 60
            while (b := c.batches.retrieve(batch_id)).status != "completed":
                assert b.status in ("in_progress", "finalizing"), b.status
                assert time.monotonic() < deadline, "the batch did not finish after the restart"
                time.sleep(0.05)
            assert b.request_counts is not None
            assert (b.request_counts.completed, b.request_counts.failed) == (LINES, 0)
            assert b.error_file_id is None
            out = [orjson.loads(line) for line in c.files.content(b.output_file_id).content.splitlines()]  # type: ignore[arg-type]
            resumed = metric_sum(again, "gateway_batch_lines_total")
        ids = Counter(line["custom_id"] for line in out)
        assert ids == Counter(f"id-{i}" for i in range(LINES))
        assert 0 < resumed <= LINES - LINES // 2  # the second gateway ran only what was left
        # Lines committed before the kill never reach the backend again: beyond the lines, the
        # backend finished only those in flight at the kill (and the few answered in the moment
        # before their commit), where a rerun from the start would add LINES / 2.
        assert in_flight < LINES // 2 - 8
        assert LINES <= metric_sum(sim, "vllm:request_success_total") <= LINES + in_flight + 8
