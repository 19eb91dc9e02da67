"""Keeps the garbage collector's full passes from stalling the event loop through a burst.

CPython's cycle collector walks every tracked object of its oldest generation in one pass, and the
event loop waits for the whole pass. It starts one when the middle generation has been collected
`threshold2` times (10 by default) since the last and the objects promoted since then exceed a
quarter of those already old. While thousands of requests arrive at once both hold again and again,
each pass longer than the last: at 5,000 queued requests (about 230,000 objects) the gateway made
five passes of 60-180 ms within three seconds, and every request and health probe waited out each.

Two settings, made once the application has started:
- `gc.freeze()`: everything that exists then (modules, config, tables, about 45,000 objects) lives as
  long as the process, so it leaves the collector's view and no later pass walks it again.
- threshold2 `FULL_AFTER` (100): a full pass waits for 100 collections of the middle generation, ten
  times the default. The young generations are collected as before, and they free nearly all the
  cyclic garbage a request leaves; what reached the oldest generation (a request that lived through
  a few collections, then ended in a cycle) waits ten times as long for the next pass. Closed
  connections leave no cycles (gateway.server.listener), so that is little.
"""

from __future__ import annotations

import gc

FULL_AFTER = 100
"""Collections of the middle generation between two full passes (CPython's default: 10)."""


def pace_full_collections() -> None:
    """Freeze what exists now and space the full passes out (see the module's docstring)."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_AFTER)
