"""Which prompt chunks each backend is expected to hold in its prefix cache: a bounded LRU per backend.

The gateway cannot see a backend's cache, so it remembers what it sent there. When a request is
routed to a backend, every chunk hash of its prompt is recorded as the newest entry of that
backend's LRU; the expected cached prefix of a new prompt on a backend is its leading run of chunk
hashes found there, stopping at the first miss (the chain makes a later hit without the earlier
ones impossible in vLLM's cache, so it is not counted here either).

Eviction follows vLLM's: a finished request frees its blocks last block first, so the start of a
prompt outlives its end. The chunks of a routed prompt are therefore recorded from the last to the
first, the first becoming the most recent, and the LRU drops from the other end.

Size. A backend's LRU holds as many chunks as its KV cache holds tokens (`cache_config_info`:
num_gpu_blocks x block_size) at CHARS_PER_TOKEN characters per token, an estimate of English text
under common tokenizers (the Gateway API inference extension's prefix scorer assumes the same 4).
It is an upper bound: running requests and their output share that cache, so an entry may be
evicted by vLLM before it is here, which costs a misplaced request, never a wrong answer. Until a
scrape says the capacity, DEFAULT_CAPACITY_TOKENS applies (500,000 tokens: Llama-3-8B on an
80 GB GPU, the same extension's default sizing).

Forgetting. A backend that restarts or is ejected has lost its cache (or may have): its LRU is
cleared when the backend's cache epoch, bumped on those events, differs from the one last seen.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from gateway.routing.key import CHUNK_CHARS

CHARS_PER_TOKEN = 4
DEFAULT_CAPACITY_TOKENS = 500_000


def capacity_chunks(kv_tokens: int | None) -> int:
    """How many chunks a backend with `kv_tokens` of KV cache is taken to hold (at least 1)."""
    tokens = DEFAULT_CAPACITY_TOKENS if kv_tokens is None else kv_tokens
    return max(1, tokens * CHARS_PER_TOKEN // CHUNK_CHARS)


class ChunkLRU:
    """The chunk hashes one backend is expected to hold, least recently used first."""

    __slots__ = ("_entries", "capacity", "epoch")

    def __init__(self, capacity: int, epoch: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.epoch = epoch
        self._entries: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, chunk: int) -> bool:
        return chunk in self._entries

    def match(self, chunks: Sequence[int]) -> int:
        """How many leading chunks are held: the expected cached prefix, in chunks."""
        entries = self._entries
        n = 0
        for chunk in chunks:
            if chunk not in entries:
                break
            n += 1
        return n

    def add(self, chunks: Sequence[int]) -> None:
        """Record a prompt sent here: its first chunk becomes the most recent, then evict."""
        entries = self._entries
        for chunk in reversed(chunks):
            entries[chunk] = None
            entries.move_to_end(chunk)
        self._evict()

    def resize(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._evict()

    def clear(self, epoch: int) -> None:
        self._entries.clear()
        self.epoch = epoch

    def _evict(self) -> None:
        entries = self._entries
        while len(entries) > self.capacity:
            entries.popitem(last=False)


class PrefixIndex:
    """One model's index: a `ChunkLRU` per backend, sized and forgotten as the backend says."""

    def __init__(self) -> None:
        self._lrus: dict[str, ChunkLRU] = {}

    def lru(self, backend: str, epoch: int, kv_tokens: int | None) -> ChunkLRU:
        """The backend's LRU, cleared if its cache epoch moved and resized to its KV capacity."""
        lru = self._lrus.get(backend)
        capacity = capacity_chunks(kv_tokens)
        if lru is None:
            lru = self._lrus[backend] = ChunkLRU(capacity, epoch)
            return lru
        if lru.epoch != epoch:
            lru.clear(epoch)
        if lru.capacity != capacity:
            lru.resize(capacity)
        return lru

    def forget(self, backend: str) -> None:
        self._lrus.pop(backend, None)

    def size(self, backend: str, epoch: int) -> int:
        """Chunks held for the backend (none once its cache epoch moved)."""
        lru = self._lrus.get(backend)
        return len(lru) if lru is not None and lru.epoch == epoch else 0
