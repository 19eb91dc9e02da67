"""Keeps the garbage collector from walking the requests in flight again and again.

CPython's cycle collector walks every tracked object of its oldest generation in one pass, and the
event loop waits for the whole pass. It starts one when the middle generation has been collected
`threshold2` times (10 by default) since the last and the objects promoted since then exceed a
quarter of those already old. While thousands of requests arrive at once both hold again and again,
each pass longer than the last: at 5,000 queued requests (about 230,000 objects) the gateway made
five passes of 60-180 ms within three seconds, and every request and health probe waited out each.

Three settings, made once the application has started:
- `gc.freeze()`: everything that exists then (modules, config, tables, about 45,000 objects) lives as
  long as the process, so it leaves the collector's view and no later pass walks it again.
- threshold2 `FULL_AFTER` (100): a full pass waits for 100 collections of the middle generation, ten
  times the default. The young generations are collected as before, and they free nearly all the
  cyclic garbage a request leaves; what reached the oldest generation (a request that lived through
  a few collections, then ended in a cycle) waits ten times as long for the next pass. Closed
  connections leave no cycles (gateway.server.listener), so that is little.
- threshold0 `YOUNG` (20,000): a young collection every 20,000 net allocations of tracked objects,
  not CPython's 700. A young collection walks what was allocated since the last one and is still
  alive, and the middle one what survived those: the requests in flight (their coroutines, futures,
  headers) are alive, so at 700, a collection every request or two, the same requests were walked
  again and again, about 5% of the CPU a proxied request costs. At 20,000 one comes about every
  hundred requests and walks at most 20,000 objects, a fraction of a millisecond.
"""

from __future__ import annotations

import gc

YOUNG = 20_000
"""Net allocations of tracked objects between two young collections (CPython's default: 700)."""
FULL_AFTER = 100
"""Collections of the middle generation between two full passes (CPython's default: 10)."""


def pace_full_collections() -> None:
    """Freeze what exists now and space the collections out (see the module's docstring)."""
    gc.freeze()
    _, middle, _ = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, FULL_AFTER)
