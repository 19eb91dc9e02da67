"""The per-backend chunk LRU: leading matches, eviction order, sizing from KV capacity, forgetting."""

from __future__ import annotations

import pytest

from gateway.routing.index import (
    CHARS_PER_TOKEN,
    DEFAULT_CAPACITY_TOKENS,
    ChunkLRU,
    PrefixIndex,
    capacity_chunks,
)
from gateway.routing.key import CHUNK_CHARS


def test_match_counts_the_leading_run_only() -> None:
    lru = ChunkLRU(100)
    lru.add([1, 2, 3, 4])
    assert lru.match([1, 2, 3, 4, 5]) == 4
    assert lru.match([1, 2, 9, 4]) == 2
    assert lru.match([9, 1, 2]) == 0
    assert lru.match([]) == 0


def test_eviction_drops_the_end_of_the_oldest_prompt_first() -> None:
    lru = ChunkLRU(6)
    lru.add([1, 2, 3, 4])
    lru.add([10, 11, 12])  # 7 entries: one must go, the tail of the older prompt
    assert len(lru) == 6
    assert 4 not in lru and lru.match([1, 2, 3, 4]) == 3
    lru.add([20, 21])
    assert lru.match([1, 2, 3]) == 1 and lru.match([10, 11, 12]) == 3


def test_a_match_refreshed_by_routing_survives_newer_prompts() -> None:
    lru = ChunkLRU(4)
    lru.add([1, 2])
    lru.add([3, 4])
    lru.add([1, 2])  # routed again: now the most recent
    lru.add([5, 6])
    assert lru.match([1, 2]) == 2 and lru.match([3, 4]) == 0


def test_capacity_follows_kv_tokens() -> None:
    assert capacity_chunks(None) == DEFAULT_CAPACITY_TOKENS * CHARS_PER_TOKEN // CHUNK_CHARS
    assert capacity_chunks(8192) == 8192 * CHARS_PER_TOKEN // CHUNK_CHARS
    assert capacity_chunks(1) == 1
    with pytest.raises(ValueError):
        ChunkLRU(0)


def test_index_resizes_when_the_backend_reports_its_capacity() -> None:
    index = PrefixIndex()
    lru = index.lru("b0", epoch=0, kv_tokens=None)
    lru.add(list(range(500)))
    smaller = index.lru("b0", epoch=0, kv_tokens=64 * 5)  # 5 chunks
    assert smaller is lru and smaller.capacity == 5 and len(smaller) == 5
    assert smaller.match([0, 1, 2, 3, 4]) == 5  # the first chunks are the most recent
    assert index.size("b0", 0) == 5 and index.size("b1", 0) == 0


def test_index_forgets_a_backend_whose_cache_epoch_moved() -> None:
    index = PrefixIndex()
    index.lru("b0", 0, None).add([1, 2, 3])
    index.lru("b1", 0, None).add([1, 2, 3])
    assert index.size("b0", 1) == 0  # reported empty at once
    assert index.lru("b0", 1, None).match([1, 2, 3]) == 0
    assert index.lru("b1", 0, None).match([1, 2, 3]) == 3
