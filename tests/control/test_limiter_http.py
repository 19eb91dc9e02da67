"""What a limiter sees of requests in flight, end to end: the real `openai` SDK -> gateway ->
simulated vLLM over loopback."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import openai

from tests.procs import spawn_gateway, spawn_sim


def test_a_whole_answer_twice_past_the_e2e_target_is_a_miss_before_it_arrives() -> None:
    """The backend's front end holds every request 3 s; with an e2e target of 0.5 s, a non-streaming
    request shows as an e2e value of at least 1 s while it is still in flight."""
    with spawn_sim("--profile", "tiny-cpu", "--frontend-delay", "3") as sim:
        config = {
            "backends": [{"url": sim.url, "name": "a"}],
            "controller": {"algorithm": "fixed", "params": {"limit": 4}},
            "sla": {"e2e_p90": 0.5, "queue_share": 0},  # the engine side holds the whole target
        }
        with spawn_gateway(config) as gw:
            client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
            answers: list[openai.types.Completion] = []
            request = threading.Thread(
                target=lambda: answers.append(
                    client.completions.create(model="tiny-llama", prompt="hello", max_tokens=4)
                )
            )
            request.start()
            try:
                seen: dict[str, Any] = {}
                deadline = time.monotonic() + 2.5  # the answer cannot come before 3 s
                while time.monotonic() < deadline:
                    seen = httpx.get(f"{gw.url}/admin/state").json()["backends"][0]
                    if "e2e" in seen["p90"]:
                        break
                    time.sleep(0.05)
                assert seen["inflight"] == 1 and not answers
                assert seen["p90"]["e2e"] >= 1.0
            finally:
                request.join(timeout=30)
            assert answers and answers[0].usage is not None and answers[0].usage.completion_tokens == 4
            assert httpx.get(f"{gw.url}/admin/state").json()["backends"][0]["inflight"] == 0
