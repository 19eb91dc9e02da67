"""Per-tenant counters: tokens and requests by tenant and model, and whether quotas are local shares.

Label values are configured tenant names and models a backend serves (gateway.tenancy.usage checks
neither: its callers only pass those), so the series are bounded by the configuration. The counters
are the event loop's (gateway.metrics.series); the three series a request moves are kept per
(tenant, model), one lookup instead of three.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from gateway.metrics.series import CounterSeries, LoopCounter


class TenantMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.tokens = LoopCounter(
            "gateway_tenant_tokens",
            "Tokens served per tenant and model, as the backends reported them (kind: prompt, output).",
            ["tenant", "model", "kind"],
            registry=registry,
        )
        self.requests = LoopCounter(
            "gateway_tenant_requests",
            "Requests per tenant and model that a backend answered.",
            ["tenant", "model"],
            registry=registry,
        )
        self.local_share = Gauge(
            "gateway_quota_local_share",
            "1 while Redis is configured but not answering and this replica enforces its share of "
            "every tenant quota (the quota divided by the replicas alive at the last contact).",
            registry=registry,
        )
        self._children: dict[tuple[str, str], tuple[CounterSeries, CounterSeries, CounterSeries]] = {}

    def add(self, tenant: str, model: str, prompt_tokens: int, output_tokens: int) -> None:
        key = (tenant, model)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self.tokens.labels(tenant, model, "prompt"),
                self.tokens.labels(tenant, model, "output"),
                self.requests.labels(tenant, model),
            )
        prompt, output, requests = children
        prompt.inc(prompt_tokens)
        output.inc(output_tokens)
        requests.inc()
