"""Scoring backends for a request: expected cached prefix against load, under a bound on imbalance.

A backend's load is its share of its limit in use, u_b = inflight_b / limit_b, and the mean load is
that of the pool, U = sum(inflight) / sum(limit). The bound (consistent hashing with bounded loads,
Mirrokni, Thorup and Zadimoghaddam, SODA 2018, weighted by limit) lets backend b take one more
request only if afterwards

    (inflight_b + 1) / limit_b <= (1 + e) * (sum(inflight) + 1) / sum(limit)

so no backend is above (1 + e) times the mean. When no backend with room meets it (a light load,
where one request is more than e of the mean, or the backends within it are full or excluded), the
backends with room that would be least loaded afterwards may take it: then the request goes where
load alone would send it, so the busiest backend is never above max((1 + e) x the mean, the least
loaded + one request). The bound keeps one hot prefix from piling requests on one backend while
others have room; it never keeps a slot idle that a request could use.

Among the backends allowed, request r of n_r chunks scores on backend b

    s(r, b) = m(r, b) + max(n_r, 1) * (FREE_WEIGHT * free_b - KV_WEIGHT * kv_b)
              + SESSION_WEIGHT * max(n_r, 1)  if b holds r's session

m(r, b) the chunks of r expected cached on b, free_b = 1 - u_b the free share of b's limit, kv_b
vLLM's KV-cache usage (0..1, from the latest scrape). In units of chunks: a fully cached prompt is
worth twice an idle backend over a full one, so the cached prefix decides whenever there is one and
load decides when there is none (a prompt with nothing cached anywhere goes where the most room is).
KV usage breaks ties between equally free backends toward the one less likely to preempt. A held
session outweighs any cached prefix and load (SESSION_WEIGHT > 1 + FREE_WEIGHT + KV_WEIGHT), so a
conversation stays on its backend while that backend is allowed.

Several requests (late binding: the waiters allowed to go next) compete for the free slots: each is
given its best backend as above, and the one that gains most there goes, its gain being its cached
chunks plus the session bonus: the prefill saved, not the share of it (saving 90 of 100 chunks
beats saving 10 of 10), and not the load, which is the same whoever takes the slot. Ties go to the
earlier request (so with nothing cached anywhere the order stays first come, first served), then to
the earlier backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

FREE_WEIGHT = 0.5
KV_WEIGHT = 0.25
SESSION_WEIGHT = 2.0


@dataclass(frozen=True, slots=True)
class Load:
    """One backend serving the model, as the pool sees it now."""

    name: str
    inflight: int
    limit: int
    open: bool
    """May take this request now: in rotation, below its limit, not excluded."""
    kv_usage: float | None = None
    kv_tokens: int | None = None
    """KV-cache capacity in tokens (vLLM's cache_config_info), None until scraped."""
    epoch: int = 0
    """Bumped whenever the backend may have lost its prefix cache (restart, ejection)."""

    @property
    def free(self) -> float:
        return (self.limit - self.inflight) / self.limit if self.limit > 0 else 0.0


class Choice(NamedTuple):
    request: int
    """Index of the request chosen among those offered."""
    backend: int
    """Index of the backend chosen among the loads."""
    matched: int = 0
    """Chunks of the request expected cached on that backend."""


class IndexReport(NamedTuple):
    """A prefix index's view of one backend, for /admin/state and the metrics."""

    chunks: int
    """Chunks the index holds for the backend now."""
    queried: int
    """Prompt chunks routed to the backend since start."""
    hits: int
    """Of those, the chunks the index expected the backend to have cached."""

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.queried if self.queried else None


def allowed(loads: Sequence[Load], imbalance: float) -> list[int]:
    """Indexes of the open backends that may take one more request under the bound: a lone open
    backend always may (within the bound, or the least loaded after it either way)."""
    open_: list[int] = []
    inflight = limit = 0
    for i, load in enumerate(loads):
        inflight += load.inflight
        limit += load.limit
        if load.open and load.limit > 0:
            open_.append(i)
    if len(open_) <= 1:
        return open_
    after = [(loads[i].inflight + 1) / loads[i].limit for i in open_]
    # The small slack keeps float error (1.2 * 10 / 20 = 0.6000000000000001) from refusing a request.
    bound = (1.0 + imbalance) * (inflight + 1) / limit * (1 + 1e-9)
    within = [i for i, u in zip(open_, after, strict=True) if u <= bound]
    if within:
        return within
    lowest = min(after)
    return [i for i, u in zip(open_, after, strict=True) if u == lowest]


def load_term(load: Load) -> float:
    kv = load.kv_usage if load.kv_usage is not None else 0.0
    return FREE_WEIGHT * load.free - KV_WEIGHT * kv


def best(
    chunk_counts: Sequence[int],
    loads: Sequence[Load],
    candidates: Sequence[int],
    matched: Callable[[int, int], int],
    session_on: Callable[[int, int], bool],
) -> Choice | None:
    """Each request's best backend by score, and the request that gains most there.

    `matched(r, b)` and `session_on(r, b)` say what request r finds on backend b.
    """
    top: Choice | None = None
    top_gain = -1.0
    for r, n in enumerate(chunk_counts):
        weight = max(n, 1)
        mine: Choice | None = None
        score = gain = -math.inf
        for b in candidates:
            m = matched(r, b) if n else 0
            bonus = SESSION_WEIGHT * weight if session_on(r, b) else 0.0
            s = m + bonus + weight * load_term(loads[b])
            if s > score:
                mine, score, gain = Choice(r, b, m), s, m + bonus
        if mine is not None and gain > top_gain:
            top, top_gain = mine, gain
    return top
