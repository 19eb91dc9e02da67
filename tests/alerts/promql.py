"""The gateway's metric contract (the metrics table in docs/operations.md) and the metric names a
PromQL expression uses."""

from __future__ import annotations

import re

COUNTERS = (
    "gateway_requests_total",
    "gateway_rejected_requests_total",
    "gateway_controller_adjustments_total",
    "gateway_batch_lines_total",
    "gateway_batch_tokens_total",
    "gateway_sla_requests_total",
)
GAUGES = (
    "gateway_queue_depth",
    "gateway_inflight_requests",
    "gateway_concurrency_limit",
    "gateway_concurrency_ceiling",
    "gateway_concurrency_floor",
    "gateway_latency_p90_seconds",
    "gateway_sla_target_seconds",
    "gateway_backend_target_seconds",
    "gateway_sla_infeasible",
    "gateway_latency_floor_seconds",
    "gateway_backend_up",
    "gateway_backend_kv_cache_usage_ratio",
    "gateway_backend_waiting_requests",
    "gateway_capacity_exhausted",
    "gateway_coordination_up",
    "gateway_coordination_replicas",
    "gateway_batches",
    "gateway_batch_lines_pending",
    "gateway_batch_inflight_requests",
    "gateway_client_ttft_p90_seconds",
    "gateway_client_sla_target_seconds",
)
HISTOGRAMS = (
    "gateway_queue_wait_seconds",
    "gateway_time_to_first_token_seconds",
    "gateway_request_duration_seconds",
)
# The series names a scrape of the gateway can hold.
SERIES = frozenset(
    (*COUNTERS, *GAUGES, *(f"{h}{s}" for h in HISTOGRAMS for s in ("_bucket", "_sum", "_count")))
)
# Series Prometheus itself writes for every scrape; `up` is how a rule sees a gateway that is down.
PROMETHEUS_SERIES = frozenset({"up"})

_KEYWORDS = frozenset(
    {
        *("by", "without", "on", "ignoring", "group_left", "group_right", "bool"),
        *("and", "or", "unless", "offset", "atan2", "inf", "nan"),
    }
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(?![\w:]|\s*\()")


def metric_names(expr: str) -> set[str]:
    """Metric names selected in `expr`: identifiers that are not functions, keywords, label names
    in groupings, label matchers, strings or durations."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    return {name for name in _IDENT.findall(text) if name.lower() not in _KEYWORDS}


def template_queries(annotation: str) -> list[str]:
    """The PromQL of every `printf "..." ... | query` in an alert annotation, `%q` as `""`."""
    found = re.findall(r'printf\s+"((?:[^"\\]|\\.)*)"[^}]*\|\s*query', annotation)
    return [q.replace('\\"', '"').replace("%q", '""') for q in found]
