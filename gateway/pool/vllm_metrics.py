"""Reads the few series the controller needs out of a vLLM server's Prometheus text exposition.

A full exposition parser costs milliseconds on vLLM's few hundred lines and runs on the event loop
that also forwards tokens, so this scans lines and parses only the names it wants.
Names (vLLM 0.2x-0.33): `vllm:kv_cache_usage_perc` (servers before 0.12: `vllm:gpu_cache_usage_perc`),
`vllm:num_requests_waiting`, `vllm:num_requests_running`, `vllm:num_preemptions_total`,
`vllm:generation_tokens_total`, `vllm:cache_config_info{block_size,num_gpu_blocks}`, the
prefix-cache counters `vllm:prefix_cache_queries_total` and `vllm:prefix_cache_hits_total`
(tokens), and the latency histograms. Series with several `engine` labels (data parallel) are
summed, except KV usage, where the fullest engine counts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    # Per request, as the SLA's TPOT is (0.11 on); older servers have only the per-step gaps.
    "tpot": (
        "vllm:request_time_per_output_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
    ),
    "e2e": ("vllm:e2e_request_latency_seconds",),
}
_BUCKET_NAMES = {f"{name}_bucket": name for names in HISTOGRAMS.values() for name in names}
_GAUGES = {
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage_legacy",
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:num_preemptions": "preemptions",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:prefix_cache_queries_total": "prefix_queries",
    "vllm:prefix_cache_hits_total": "prefix_hits",
}

_WANTED = frozenset({"vllm:cache_config_info", *_BUCKET_NAMES, *_GAUGES})


@dataclass(slots=True)
class VllmScrape:
    """Raw values from one scrape. Histograms are cumulative: upper bound -> count."""

    kv_usage: float | None = None
    waiting: float | None = None
    running: float | None = None
    preemptions_total: float | None = None
    generation_tokens: float | None = None
    """Output tokens the engine has generated since it started (a counter)."""
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    """vLLM's prefix-cache counters: tokens looked up, and of those found cached."""
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    histograms: dict[str, dict[float, float]] = field(default_factory=dict)
    models: set[str] = field(default_factory=set)

    @property
    def kv_capacity_tokens(self) -> int | None:
        if self.block_size is None or self.num_gpu_blocks is None:
            return None
        return self.block_size * self.num_gpu_blocks


def _labels(text: str) -> dict[str, str]:
    return dict(_LABEL.findall(text))


def parse_vllm_metrics(text: str) -> VllmScrape:
    scan = _Scan()
    for line in text.splitlines():
        if line.startswith("vllm:") and (sample := _sample(line)) is not None:
            scan.add(*sample)
    return scan.result()


def _sample(line: str) -> tuple[str, str, float] | None:
    """(name, the text between the braces, value) of a sample this module reads; None for any other
    line, or one without a number."""
    brace = line.find("{")
    if brace >= 0:
        name = line[:brace]
        if name not in _WANTED:
            return None
        end = line.rfind("}")
        labels_text, rest = line[brace + 1 : end], line[end + 1 :]
    else:
        name, _, rest = line.partition(" ")
        if name not in _WANTED:
            return None
        labels_text = ""
    parts = rest.split()
    if not parts:
        return None
    try:
        return name, labels_text, float(parts[0])
    except ValueError:
        return None


class _Scan:
    """What the samples of one exposition add up to, sample by sample."""

    def __init__(self) -> None:
        self.out = VllmScrape()
        self.sums: dict[str, float] = {}
        self.kv_values: list[float] = []
        self.legacy_kv: list[float] = []
        self.by_family: dict[str, dict[float, float]] = {}

    def add(self, name: str, labels_text: str, value: float) -> None:
        if name == "vllm:cache_config_info":
            self._cache_config(_labels(labels_text))
        elif (family := _BUCKET_NAMES.get(name)) is not None:
            self._bucket(family, labels_text, value)
        elif (key := _GAUGES.get(name)) is not None:
            self._gauge(key, labels_text, value)

    def _cache_config(self, labels: dict[str, str]) -> None:
        try:
            self.out.block_size = int(float(labels["block_size"]))
            self.out.num_gpu_blocks = int(float(labels["num_gpu_blocks"]))
        except (KeyError, ValueError):
            pass

    def _bucket(self, family: str, labels_text: str, value: float) -> None:
        le = _labels(labels_text).get("le")
        if le is None:
            return
        bound = math.inf if le in ("+Inf", "Inf") else float(le)
        hist = self.by_family.setdefault(family, {})
        hist[bound] = hist.get(bound, 0.0) + value

    def _gauge(self, key: str, labels_text: str, value: float) -> None:
        if "model_name" in labels_text:
            model = _labels(labels_text).get("model_name")
            if model:
                self.out.models.add(model)
        if key == "kv_usage":
            self.kv_values.append(value)
        elif key == "kv_usage_legacy":
            self.legacy_kv.append(value)
        else:
            self.sums[key] = self.sums.get(key, 0.0) + value

    def result(self) -> VllmScrape:
        out = self.out
        # Newer servers export a renamed histogram beside its deprecated twin: take the first name found.
        for signal, names in HISTOGRAMS.items():
            found = next((self.by_family[f] for f in names if f in self.by_family), None)
            if found is not None:
                out.histograms[signal] = found
        kv = self.kv_values or self.legacy_kv
        out.kv_usage = max(kv) if kv else None
        out.waiting = self.sums.get("waiting")
        out.running = self.sums.get("running")
        out.preemptions_total = self.sums.get("preemptions")
        out.generation_tokens = self.sums.get("generation_tokens")
        out.prefix_queries = self.sums.get("prefix_queries")
        out.prefix_hits = self.sums.get("prefix_hits")
        return out
