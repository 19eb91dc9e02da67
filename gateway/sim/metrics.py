"""vLLM's Prometheus metrics for the simulated server: real names, labels and bucket boundaries.

Names, label names (`model_name`, `engine`) and histogram buckets follow vLLM's
`vllm/v1/metrics/loggers.py` (`PrometheusStatLogger`): TTFT buckets 0.001 .. 2560 s, the
per-token buckets 0.01 .. 80 s shared by `inter_token_latency_seconds`,
`time_per_output_token_seconds` (both per step) and `request_time_per_output_token_seconds` (a
request's decode time over its output tokens after the first, observed when it finishes), the
request-latency buckets 0.3 .. 7680 s shared by e2e, queue, prefill, decode and inference time,
token-count histograms on 1-2-5 buckets up to max_model_len, and `cache_config_info` as a gauge
fixed at 1 whose labels carry the cache config.
Each server owns its registry; nothing touches prometheus_client's global one.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.sim.engine import Engine, StepReport
from gateway.sim.profiles import Profile

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TOKEN_LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def buckets_1_2_5(max_value: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to max_value (vLLM's build_1_2_5_buckets)."""
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return out
            out.append(float(m * scale))
        scale *= 10


class _Series:
    """Creates one engine's series: every one carries `model_name` and `engine` ("0")."""

    LABELS = ("model_name", "engine")

    def __init__(self, registry: CollectorRegistry, model: str) -> None:
        self.registry = registry
        self.values = (model, "0")

    def gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, self.LABELS, registry=self.registry).labels(*self.values)

    def counter(self, name: str, doc: str) -> Counter:
        return Counter(name, doc, self.LABELS, registry=self.registry).labels(*self.values)

    def histogram(self, name: str, doc: str, buckets: tuple[float, ...] | list[float]) -> Histogram:
        return Histogram(name, doc, self.LABELS, buckets=buckets, registry=self.registry).labels(*self.values)


class SimMetrics:
    def __init__(self, profile: Profile, model: str) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._model = model
        series = _Series(self.registry, model)
        self._add_state(series)
        self._add_counters(series)
        self._add_token_histograms(series, profile.max_model_len)
        self._add_latency_histograms(series)
        _add_cache_config(self.registry, profile)

    def _add_state(self, s: _Series) -> None:
        self.running = s.gauge("vllm:num_requests_running", "Number of requests in model execution.")
        self.waiting = s.gauge("vllm:num_requests_waiting", "Number of requests waiting.")
        self.kv_usage = s.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent.")
        self.gpu_cache_usage = s.gauge(
            "vllm:gpu_cache_usage_perc", "GPU KV-cache usage (old name of kv_cache_usage_perc)."
        )

    def _add_counters(self, s: _Series) -> None:
        self.prefix_queries = s.counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in queried tokens."
        )
        self.prefix_hits = s.counter("vllm:prefix_cache_hits", "Prefix cache hits, in cached tokens.")
        self.preemptions = s.counter("vllm:num_preemptions", "Cumulative number of preemptions.")
        self.prompt_tokens = s.counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = s.counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*s.LABELS, "finished_reason"),
            registry=s.registry,
        )

    def _add_token_histograms(self, s: _Series, max_model_len: int) -> None:
        token_buckets = buckets_1_2_5(max_model_len)
        self.req_prompt_tokens = s.histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        )
        self.req_generation_tokens = s.histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", token_buckets
        )
        self.iteration_tokens = s.histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            ITERATION_TOKEN_BUCKETS,
        )

    def _add_latency_histograms(self, s: _Series) -> None:
        self.ttft = s.histogram(
            "vllm:time_to_first_token_seconds", "Time to first token in seconds.", TTFT_BUCKETS
        )
        self.itl = s.histogram(
            "vllm:inter_token_latency_seconds", "Inter-token latency in seconds.", TOKEN_LATENCY_BUCKETS
        )
        self.tpot = s.histogram(
            "vllm:time_per_output_token_seconds", "Time per output token in seconds.", TOKEN_LATENCY_BUCKETS
        )
        self.request_tpot = s.histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            TOKEN_LATENCY_BUCKETS,
        )
        phase = {
            "e2e": ("vllm:e2e_request_latency_seconds", "End-to-end request latency in seconds."),
            "queue": ("vllm:request_queue_time_seconds", "Time spent in WAITING phase for request."),
            "inference": ("vllm:request_inference_time_seconds", "Time spent in RUNNING phase for request."),
            "prefill": ("vllm:request_prefill_time_seconds", "Time spent in PREFILL phase for request."),
            "decode": ("vllm:request_decode_time_seconds", "Time spent in DECODE phase for request."),
        }
        made = {key: s.histogram(name, doc, REQUEST_LATENCY_BUCKETS) for key, (name, doc) in phase.items()}
        self.e2e = made["e2e"]
        self.queue = made["queue"]
        self.inference = made["inference"]
        self.prefill = made["prefill"]
        self.decode = made["decode"]

    def record(self, report: StepReport, engine: Engine) -> None:
        self.observe_state(engine)
        if report.preempted:
            self.preemptions.inc(report.preempted)
        if report.prompt_tokens:
            self.prompt_tokens.inc(report.prompt_tokens)
        if report.generation_tokens:
            self.generation_tokens.inc(report.generation_tokens)
        if report.prefix_queries:
            self.prefix_queries.inc(report.prefix_queries)
            self.prefix_hits.inc(report.prefix_hits)
        if report.iteration_tokens:
            self.iteration_tokens.observe(report.iteration_tokens)
        for ttft in report.ttfts:
            self.ttft.observe(ttft)
        itl = self.itl
        tpot = self.tpot
        for gap in report.itls:
            itl.observe(gap)
            tpot.observe(gap)
        for seq in report.finished:
            assert seq.finished_at is not None
            scheduled = seq.scheduled_at if seq.scheduled_at is not None else seq.arrival
            first = seq.first_token_at if seq.first_token_at is not None else seq.finished_at
            self.success.labels(self._model, "0", seq.finish_reason).inc()
            self.e2e.observe(seq.finished_at - seq.arrival)
            self.queue.observe(scheduled - seq.arrival)
            self.inference.observe(seq.finished_at - scheduled)
            self.prefill.observe(first - scheduled)
            self.decode.observe(seq.finished_at - first)
            self.request_tpot.observe(
                (seq.finished_at - first) / (seq.num_output - 1) if seq.num_output > 1 else 0.0
            )
            self.req_prompt_tokens.observe(seq.prompt_len)
            self.req_generation_tokens.observe(seq.num_output)

    def observe_state(self, engine: Engine) -> None:
        self.running.set(engine.num_running)
        self.waiting.set(engine.num_waiting)
        usage = engine.kv_usage
        self.kv_usage.set(usage)
        self.gpu_cache_usage.set(usage)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _add_cache_config(registry: CollectorRegistry, profile: Profile) -> None:
    """`vllm:cache_config_info`: a gauge fixed at 1 whose labels carry the cache config."""
    cache_info = {
        "block_size": str(profile.block_size),
        "cache_dtype": "auto",
        "enable_prefix_caching": str(profile.enable_prefix_caching),
        "gpu_memory_utilization": "0.9",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(profile.num_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "engine": "0",
    }
    gauge = Gauge(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        tuple(cache_info),
        registry=registry,
    )
    gauge.labels(**cache_info).set(1)
