"""Paged KV cache: a pool of fixed-size blocks with vLLM's automatic prefix caching.

Model (vLLM v1 `BlockPool` / `KVCacheManager`, docs "Automatic Prefix Caching"):
- A block holds `block_size` tokens. A sequence of L tokens holds ceil(L / block_size) blocks.
- A full block is identified by a hash of every token up to its end (a chain:
  h_j = H(h_{j-1}, tokens of block j)), so two sequences with the same prefix share its blocks.
- Blocks are reference counted. A block whose count drops to 0 goes to the tail of the free queue
  but keeps its hash: it is an evictable cache entry until allocation takes it from the head
  (least recently freed first). A sequence frees its blocks tail first, so the end of a prompt is
  evicted before its start, which keeps the shared beginnings alive longest.
- Usage as vLLM reports it: 1 - free_blocks / num_blocks, cached-but-free blocks counted as free.
"""

from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    def __init__(self, num_blocks: int, *, caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError("num_blocks must be >= 1")
        self.num_blocks = num_blocks
        self.caching = caching
        self._refs = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}
        # Insertion order is eviction order: head = next to hand out.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def usage(self) -> float:
        return 1.0 - len(self._free) / self.num_blocks

    def lookup(self, block_hash: int) -> int | None:
        """The block caching this prefix hash, if any."""
        return self._cached.get(block_hash) if self.caching else None

    def is_free(self, block: int) -> bool:
        return self._refs[block] == 0

    def touch(self, block: int) -> None:
        """Take a reference on a cached block (a prefix-cache hit)."""
        if self._refs[block] == 0:
            del self._free[block]
        self._refs[block] += 1

    def allocate(self, count: int) -> list[int]:
        if count > len(self._free):
            raise RuntimeError(f"asked for {count} blocks, {len(self._free)} free")
        out: list[int] = []
        for _ in range(count):
            block, _none = self._free.popitem(last=False)
            old = self._hash[block]
            if old is not None:
                if self._cached.get(old) == block:
                    del self._cached[old]
                self._hash[block] = None
            self._refs[block] = 1
            out.append(block)
        return out

    def free(self, blocks: list[int]) -> None:
        """Drop one reference on each block; evict order puts the last block first."""
        for block in reversed(blocks):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free[block] = None
            elif self._refs[block] < 0:
                raise RuntimeError(f"block {block} freed twice")

    def cache(self, block: int, block_hash: int) -> None:
        """Register a block that has just become full under its prefix hash."""
        if not self.caching or self._hash[block] is not None:
            return
        if block_hash not in self._cached:
            self._cached[block_hash] = block
            self._hash[block] = block_hash

    @property
    def num_cached(self) -> int:
        return len(self._cached)
