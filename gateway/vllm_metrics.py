"""Reads the few series the controller needs out of a vLLM server's Prometheus text exposition.

A full exposition parser costs milliseconds on vLLM's few hundred lines and runs on the event loop
that also forwards tokens, so this scans lines and parses only the names it wants.
Names (vLLM 0.2x-0.33): `vllm:kv_cache_usage_perc` (servers before 0.12: `vllm:gpu_cache_usage_perc`),
`vllm:num_requests_waiting`, `vllm:num_requests_running`, `vllm:num_preemptions_total`,
`vllm:cache_config_info{block_size,num_gpu_blocks}`, the prefix-cache counters
`vllm:prefix_cache_queries_total` and `vllm:prefix_cache_hits_total` (tokens), and the latency
histograms. Series with several `engine` labels (data parallel) are summed, except KV usage, where
the fullest engine counts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "tpot": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
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
    "vllm:prefix_cache_queries_total": "prefix_queries",
    "vllm:prefix_cache_hits_total": "prefix_hits",
}


@dataclass(slots=True)
class VllmScrape:
    """Raw values from one scrape. Histograms are cumulative: upper bound -> count."""

    kv_usage: float | None = None
    waiting: float | None = None
    running: float | None = None
    preemptions_total: float | None = None
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
    out = VllmScrape()
    sums: dict[str, float] = {}
    kv_values: list[float] = []
    legacy_kv: list[float] = []
    by_family: dict[str, dict[float, float]] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        brace = line.find("{")
        if brace >= 0:
            name = line[:brace]
            end = line.rfind("}")
            labels_text, rest = line[brace + 1 : end], line[end + 1 :]
        else:
            name, _, rest = line.partition(" ")
            labels_text = ""
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if name == "vllm:cache_config_info":
            labels = _labels(labels_text)
            try:
                out.block_size = int(float(labels["block_size"]))
                out.num_gpu_blocks = int(float(labels["num_gpu_blocks"]))
            except (KeyError, ValueError):
                pass
            continue
        family = _BUCKET_NAMES.get(name)
        if family is not None:
            labels = _labels(labels_text)
            le = labels.get("le")
            if le is None:
                continue
            bound = math.inf if le in ("+Inf", "Inf") else float(le)
            hist = by_family.setdefault(family, {})
            hist[bound] = hist.get(bound, 0.0) + value
            continue
        key = _GAUGES.get(name)
        if key is None:
            continue
        if "model_name" in labels_text:
            model = _labels(labels_text).get("model_name")
            if model:
                out.models.add(model)
        if key == "kv_usage":
            kv_values.append(value)
        elif key == "kv_usage_legacy":
            legacy_kv.append(value)
        else:
            sums[key] = sums.get(key, 0.0) + value
    # Newer servers export a renamed histogram beside its deprecated twin: take the first name found.
    for signal, names in HISTOGRAMS.items():
        for family in names:
            if family in by_family:
                out.histograms[signal] = by_family[family]
                break
    kv = kv_values or legacy_kv
    out.kv_usage = max(kv) if kv else None
    out.waiting = sums.get("waiting")
    out.running = sums.get("running")
    out.preemptions_total = sums.get("preemptions")
    out.prefix_queries = sums.get("prefix_queries")
    out.prefix_hits = sums.get("prefix_hits")
    return out
