"""The `prefix` strategy: send a request where its prompt's prefix is cached, within a load bound.

Per model it keeps a `PrefixIndex` (what each backend is expected to cache) and the backend each
session was last sent to (a bounded LRU of MAX_SESSIONS, so abandoned sessions age out). Both are
keyed by hashes seeded with the request's tenant and `cache_salt` (gateway.routing.key), so one
tenant's requests never match, or move, another's, and a session entry is one integer whatever the
length of the id a client sent: the map holds at most MAX_SESSIONS entries of about 100 bytes. A choice
scores every backend that may take the request under the imbalance bound (gateway.routing.scorer);
once the request is sent, its chunks are recorded on that backend and its session moves there.

Per backend it counts the prompt chunks routed there and how many of them the index expected
cached (its predicted hit rate), for /admin/state and the metrics.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.routing.index import ChunkLRU, PrefixIndex
from gateway.routing.key import RouteKey
from gateway.routing.scorer import Choice, IndexReport, Load, allowed, best

MAX_SESSIONS = 65_536


@dataclass(slots=True)
class IndexStats:
    """Since start, per backend: prompt chunks routed there, and those expected cached there."""

    queried: int = 0
    hits: int = 0


class PrefixAffinity:
    name = "prefix"

    def __init__(self, imbalance: float = 0.2) -> None:
        if not imbalance >= 0:
            raise ValueError(f"imbalance must be >= 0, got {imbalance!r}")
        self.imbalance = imbalance
        self._indexes: dict[str, PrefixIndex] = {}
        self._sessions: dict[str, OrderedDict[int, str]] = {}
        self.stats: dict[str, IndexStats] = {}

    def choose(self, model: str, routes: Sequence[RouteKey | None], loads: Sequence[Load]) -> Choice | None:
        candidates = allowed(loads, self.imbalance)
        if not candidates:
            return None
        index = self._index(model)
        if len(routes) == 1 and len(candidates) == 1:
            # Nothing to weigh: one request, one backend; only what it finds there is counted.
            route, b = routes[0], candidates[0]
            found = route.chunks if route is not None else ()
            lru = index.lru(loads[b].name, loads[b].epoch, loads[b].kv_tokens) if found else None
            return Choice(0, b, lru.match(found) if lru is not None else 0)
        lrus: dict[int, ChunkLRU] = {}
        chunks = [() if route is None else route.chunks for route in routes]
        sessions = self._sessions.get(model)

        def matched(r: int, b: int) -> int:
            lru = lrus.get(b)
            if lru is None:
                lru = lrus[b] = index.lru(loads[b].name, loads[b].epoch, loads[b].kv_tokens)
            return lru.match(chunks[r])

        def session_on(r: int, b: int) -> bool:
            route = routes[r]
            if sessions is None or route is None or route.session is None:
                return False
            return sessions.get(route.session) == loads[b].name

        return best([len(c) for c in chunks], loads, candidates, matched, session_on)

    def routed(self, model: str, route: RouteKey | None, load: Load, choice: Choice) -> None:
        if route is None:
            return
        chunks = route.chunks
        if chunks:
            self._index(model).lru(load.name, load.epoch, load.kv_tokens).add(chunks)
            stats = self.stats.get(load.name)
            if stats is None:
                stats = self.stats[load.name] = IndexStats()
            stats.queried += len(chunks)
            stats.hits += choice.matched
        if route.session is not None:
            sessions = self._sessions.get(model)
            if sessions is None:
                sessions = self._sessions[model] = OrderedDict()
            sessions[route.session] = load.name
            sessions.move_to_end(route.session)
            if len(sessions) > MAX_SESSIONS:
                sessions.popitem(last=False)

    def report(self, backend: str, epoch: int) -> IndexReport:
        stats = self.stats.get(backend, IndexStats())
        size = sum(index.size(backend, epoch) for index in self._indexes.values())
        return IndexReport(chunks=size, queried=stats.queried, hits=stats.hits)

    def forget(self, backend: str) -> None:
        for index in self._indexes.values():
            index.forget(backend)
        self.stats.pop(backend, None)

    def _index(self, model: str) -> PrefixIndex:
        index = self._indexes.get(model)
        if index is None:
            index = self._indexes[model] = PrefixIndex()
        return index
