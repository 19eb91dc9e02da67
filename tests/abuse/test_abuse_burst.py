"""A cold burst far beyond the queue, sent with the OpenAI SDK's default retries, is served in full.

300 chat completions at once (aiohttp transport, one connection each) against `llm-gateway serve`
with a queue of 25 (everything else at its default), in front of a simulated vLLM. Telling every
refused client the same second brought them back together to be refused together, and the SDK's
three attempts ran out for half of them. The scaled-down twin of `python -m loadtests.bench_burst`
(5,000 at the default queue).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loadtests.burst import sdk_burst
from tests.procs import Proc, spawn_gateway, spawn_sim


@pytest.fixture
def gateway() -> Iterator[Proc]:
    with (
        spawn_sim("--profile", "tiny-cpu") as sim,
        spawn_gateway({"backends": [sim.url], "queue": {"max_depth": 25}}) as gw,
    ):
        yield gw


@pytest.mark.timeout(90)
async def test_a_cold_burst_is_served_in_full_with_the_sdk_default_retries(gateway: Proc) -> None:
    result = await sdk_burst(gateway.url, 300, "tiny-llama", max_tokens=16)
    assert result.served == 300, result.summary()
    assert result.told_not_to_retry == 0
    # Nobody was sent away for longer than the queue's own timeout.
    assert max(result.retry_after) <= 30.0
    assert result.attempts <= 3 * 300
