"""What one routing decision costs on the request path: `Pool.pick` + release, per strategy.

Four backends with room, real limiters and backends; each decision gets a fresh routing key (so the
prefix strategy hashes the prompt every time, as it does once per request) for a short prompt
(no whole chunk) and for a chat of about 16,000 characters (a 2,000-token system prompt and some
history). The strategies alternate in rounds (A B C A B C ...) and the median round is reported, so
drift in the machine's load falls on all of them alike.
"""

from __future__ import annotations

import statistics
import time

from gateway import routing
from gateway.config import BackendConfig, HealthConfig
from gateway.control import algorithms
from gateway.control.limiter import Limiter
from gateway.pool.backends import Backend
from gateway.pool.pool import Pool
from gateway.routing import RouteKey
from gateway.types import SLA
from loadtests.routing.workloads import Text

ROUNDS = 15
PER_ROUND = 400


def _pool(strategy: str) -> Pool:
    backends = []
    for i in range(4):
        algorithm = algorithms.create("fixed", {"limit": 64}, SLA(ttft_p90=1.0))
        limiter = Limiter(algorithm, clock=time.monotonic, floor=1, max_limit=64)
        config = BackendConfig(url=f"http://b{i}", name=f"b{i}", models=("m",))
        backend = Backend(config, limiter, HealthConfig(), time.monotonic)
        backend.mark_healthy()
        backends.append(backend)
    return Pool(backends, time.monotonic, routing.create(strategy))


def _round(pool: Pool, bodies: list[dict[str, object]]) -> float:
    start = time.perf_counter()
    for body in bodies:
        got = pool.pick("m", (RouteKey.from_body(body),))
        lease = None if got is None else got[1]
        assert lease is not None
        lease.release(None)
    return (time.perf_counter() - start) / len(bodies)


def decision_cost(strategies: list[str]) -> dict[str, dict[str, float]]:
    """Microseconds per decision, per prompt kind and strategy (median of the rounds)."""
    text = Text.make(7)
    system = text.fixed(1, 2000)
    chats = [
        {
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": text.sample(1500, 2000)},
            ]
        }
        for _ in range(PER_ROUND)
    ]
    short = [{"messages": [{"role": "user", "content": text.sample(5, 30)}]} for _ in range(PER_ROUND)]
    out: dict[str, dict[str, float]] = {}
    for kind, bodies in (("short prompt", short), ("16,000-character chat", chats)):
        pools = {s: _pool(s) for s in strategies}
        samples: dict[str, list[float]] = {s: [] for s in strategies}
        for _ in range(ROUNDS):
            for strategy, pool in pools.items():
                samples[strategy].append(_round(pool, bodies))
        out[kind] = {s: statistics.median(v) * 1e6 for s, v in samples.items()}
    return out


def cost_table(costs: dict[str, dict[str, float]]) -> str:
    strategies = list(next(iter(costs.values())))
    rows = [
        "| prompt | " + " | ".join(strategies) + " |",
        "|---|" + "---:|" * len(strategies),
    ]
    for kind, per in costs.items():
        rows.append(f"| {kind} | " + " | ".join(f"{per[s]:.1f} us" for s in strategies) + " |")
    return "\n".join(rows)
