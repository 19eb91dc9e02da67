"""The SLA as clients see it, per model: the share of requests that met it, and the client TTFT P90.

Each interactive request that ends is judged once against its SLA (its model's, with the targets
its tenant names in their place: gateway.config.sla), with the latencies its client saw: TTFT and
e2e from its arrival (the wait in the gateway's queue included), TPOT as measured. `met` when every
target it measured was met (a whole answer measures no TTFT, as `SLA.met_by` judges), `missed` when
one was not or the answer failed, `refused` when the gateway answered it 429/503 itself. Patient
requests and batch lines are not judged: they chose to wait. A client that went away before its
answer is not judged either: it neither met nor missed.

`gateway_client_ttft_p90_seconds` is the nearest-rank P90 of the TTFTs of the requests served in
the last `WINDOW_SECONDS` (at most `WINDOW_MAX` of them), read at scrape; `gateway_client_sla_target_seconds`
is each model's own targets (not a tenant's), so a rule or a panel compares the two per model.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.types import SLA, Clock

WINDOW_SECONDS = 60.0
WINDOW_MAX = 2000
RESULTS = ("met", "missed", "refused")


class ClientSLA(Collector):
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._counts: dict[tuple[str, str], int] = {}
        self._ttfts: dict[str, deque[tuple[float, float]]] = {}
        self._targets: dict[str, SLA] = {}

    def judge(
        self,
        model: str,
        sla: SLA,
        *,
        status: int,
        refused: bool,
        arrived: float,
        first_token_at: float | None,
        tpot: float | None,
        model_sla: SLA | None = None,
    ) -> None:
        """Count one interactive request that ended now, judged against `sla` (its tenant's targets
        merged over its model's); `model_sla` (default `sla`) is the model's, published."""
        now = self._clock()
        self._targets[model] = sla if model_sla is None else model_sla
        if refused:
            result = "refused"
        elif status != 200:
            result = "missed"
        else:
            ttft = None if first_token_at is None else first_token_at - arrived
            result = "met" if sla.met(ttft, tpot, now - arrived) else "missed"
            if ttft is not None:
                window = self._ttfts.setdefault(model, deque(maxlen=WINDOW_MAX))
                window.append((now, ttft))
        key = (model, result)
        self._counts[key] = self._counts.get(key, 0) + 1

    def p90(self, model: str) -> float | None:
        """Client TTFT P90 of `model` over the window; None when nothing was served in it."""
        window = self._ttfts.get(model)
        if not window:
            return None
        horizon = self._clock() - WINDOW_SECONDS
        while window and window[0][0] < horizon:
            window.popleft()
        values = sorted(v for _, v in window)
        if not values:
            return None
        return values[max(1, math.ceil(0.9 * len(values))) - 1]

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "gateway_sla_requests",
            "Interactive requests judged against their model's SLA as the client saw it.",
            labels=["model", "result"],
        )
        for model in sorted({m for m, _ in self._counts}):
            for result in RESULTS:
                requests.add_metric([model, result], self._counts.get((model, result), 0))
        p90 = GaugeMetricFamily(
            "gateway_client_ttft_p90_seconds",
            f"P90 time to first token as clients saw it (queue included), last {WINDOW_SECONDS:.0f} s.",
            labels=["model"],
        )
        targets = GaugeMetricFamily(
            "gateway_client_sla_target_seconds",
            "A model's P90 target as its clients see it (queue included for ttft and e2e).",
            labels=["model", "signal"],
        )
        for model, sla in sorted(self._targets.items()):
            if (value := self.p90(model)) is not None:
                p90.add_metric([model], value)
            for signal, target in sla.targets().items():
                targets.add_metric([model, signal], target)
        yield requests
        yield p90
        yield targets
