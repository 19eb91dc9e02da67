"""Reading vLLM's /metrics: samples, and histogram quantiles over the window between two scrapes."""

from __future__ import annotations

import math

import pytest

from loadtests import engine_metrics as em

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
