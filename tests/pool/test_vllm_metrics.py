import math

from gateway.pool.monitor import prefix_cache_growth, to_engine_stats
from gateway.pool.vllm_metrics import parse_vllm_metrics

EXPOSITION = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 12.0
vllm:num_requests_running{engine="1",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.93
vllm:num_preemptions_total{engine="0",model_name="m"} 17.0
vllm:cache_config_info{block_size="128",cache_dtype="auto",engine="0",num_gpu_blocks="64"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} %(a)s
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} %(b)s
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} %(b)s
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 999.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.1",model_name="m"} 5.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 5.0
vllm:request_time_per_output_token_seconds_bucket{engine="0",le="0.025",model_name="m"} 2.0
vllm:request_time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
"""


def test_reads_gauges_summing_engines_and_taking_the_fullest_kv() -> None:
    s = parse_vllm_metrics(EXPOSITION % {"a": 1.0, "b": 2.0})
    assert s.running == 15.0 and s.waiting == 4.0 and s.preemptions_total == 17.0
    assert s.kv_usage == 0.93
    assert s.kv_capacity_tokens == 8192
    assert s.models == {"m"}
    assert s.histograms["ttft"] == {0.1: 1.0, 1.0: 2.0, math.inf: 2.0}
    # the per-request TPOT wins over the per-step gaps, as the SLA's TPOT is per request
    assert s.histograms["tpot"] == {0.025: 2.0, math.inf: 2.0}


def test_servers_without_a_per_request_tpot_fall_back_to_the_per_step_gaps() -> None:
    lines = [line for line in EXPOSITION.splitlines() if "request_time_per_output" not in line]
    s = parse_vllm_metrics("\n".join(lines) % {"a": 1.0, "b": 2.0})
    assert s.histograms["tpot"] == {0.1: 5.0, math.inf: 5.0}  # the renamed one over its old twin


def test_old_servers_kv_name_is_the_fallback() -> None:
    s = parse_vllm_metrics('vllm:gpu_cache_usage_perc{model_name="m"} 0.7\n')
    assert s.kv_usage == 0.7
    assert parse_vllm_metrics("").kv_usage is None


def test_window_p90_comes_from_bucket_deltas_between_scrapes() -> None:
    before = parse_vllm_metrics(EXPOSITION % {"a": 10.0, "b": 10.0})
    after = parse_vllm_metrics(EXPOSITION % {"a": 10.0, "b": 20.0})
    stats = to_engine_stats(after, before, now=5.0)
    # all ten requests of the window landed in (0.1, 1.0]: P90 interpolates to 0.1 + 0.9 * 0.9
    assert stats.ttft_p90 is not None and abs(stats.ttft_p90 - 0.91) < 1e-9
    assert stats.kv_capacity_tokens == 8192 and stats.at == 5.0
    assert to_engine_stats(after, None, now=5.0).ttft_p90 is None


def test_the_rate_of_generated_tokens_between_scrapes() -> None:
    def scrape(tokens: float) -> str:
        return (
            f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {tokens}\n'
            f'vllm:generation_tokens_total{{engine="1",model_name="m"}} {tokens / 2}\n'
            f'vllm:generation_tokens_created{{engine="0",model_name="m"}} 1.7e9\n'
        )

    first, later = parse_vllm_metrics(scrape(1000)), parse_vllm_metrics(scrape(1400))
    assert first.generation_tokens == 1500.0  # engines summed
    assert to_engine_stats(later, first, now=12.0, previous_at=10.0).generation_rate == 300.0
    assert to_engine_stats(first, None, now=12.0).generation_rate is None
    restarted = parse_vllm_metrics(scrape(10))
    assert to_engine_stats(restarted, later, now=14.0, previous_at=12.0).generation_rate is None
    assert to_engine_stats(parse_vllm_metrics(""), later, now=14.0, previous_at=12.0).generation_rate is None


def test_prefix_cache_counters_and_their_growth_between_scrapes() -> None:
    def scrape(queries: float, hits: float) -> str:
        return (
            f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}\n'
            f'vllm:prefix_cache_queries_created{{engine="0",model_name="m"}} 1.7e9\n'
            f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}\n'
        )

    first = parse_vllm_metrics(scrape(1000, 400))
    assert (first.prefix_queries, first.prefix_hits) == (1000.0, 400.0)
    assert prefix_cache_growth(first, None) == (0.0, 0.0, False)  # nothing before the gateway watched
    later = parse_vllm_metrics(scrape(1600, 850))
    assert prefix_cache_growth(later, first) == (600.0, 450.0, False)
    restarted = parse_vllm_metrics(scrape(120, 20))
    assert prefix_cache_growth(restarted, later) == (120.0, 20.0, True)
    assert prefix_cache_growth(parse_vllm_metrics(""), later) == (0.0, 0.0, False)
    # The limiter's view: the share of the prompt tokens looked up since the last scrape found.
    assert to_engine_stats(later, first, 1.0).prefix_hit_share == 0.75  # 450 of 600
    assert to_engine_stats(first, None, 1.0).prefix_hit_share is None  # none looked up
