"""The arithmetic the real-engine measurements rest on (no engine needed, but part of the
opt-in suite with the tool it checks)."""

from __future__ import annotations

import math

import pytest

from loadtests import closed_loop as cl
from loadtests import engine_metrics as em

pytestmark = pytest.mark.vllm

METRICS = """\
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} 30.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 40.0
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
"""


def test_histogram_quantile_of_the_observations_between_two_scrapes() -> None:
    after = em.histogram_buckets(em.parse_metrics(METRICS), "vllm:time_to_first_token_seconds")
    before = {0.5: 10.0, 1.0: 10.0, math.inf: 10.0}
    # 30 new observations: 0 in (0, 0.5], 20 in (0.5, 1.0], 10 above. P50 is the 15th: 3/4 of
    # the way through (0.5, 1.0]; P90 (the 27th) lies in the open top bucket, reported as its
    # lower bound as Prometheus does.
    assert em.histogram_quantile(before, after, 0.5) == pytest.approx(0.875)
    assert em.histogram_quantile(before, after, 0.9) == 1.0
    assert math.isnan(em.histogram_quantile(after, after, 0.9))
    assert em.metric_value(em.parse_metrics(METRICS), "vllm:num_requests_waiting") == 3.0


def test_throughput_counts_only_the_steady_window() -> None:
    workload = cl.Workload(clients=1, duration_s=10.0, warmup_s=2.0)
    # One request streams 100 tokens evenly from t=0 to t=4: half its tokens fall in [2, 10).
    record = cl.RequestRecord(stream=True, start=0.0, first_token=0.0, last_token=4.0, end=4.0)
    record.completion_tokens, record.status, record.finished = 100, 200, True
    result = cl.RunResult(workload, 0.0, 10.0, [record])
    assert result.tokens_per_s() == pytest.approx(50 / 8)
