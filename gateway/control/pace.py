"""A stream's pace so far: the seconds between its output events, read while it is in flight.

    pace = max((last - first) / (events - 1), (now - first) / events)

the mean gap between its events, or the mean had the next event come now, whichever is longer, so
a stall shows before the next event arrives. Per event, not per token: the caller divides by the
tokens an event carries (gateway.control.evidence). Read only after `PARTIAL_MIN_EVENTS` events,
so that a pace stands on several gaps and not on one.
"""

from __future__ import annotations

from gateway.types import StreamProgress

PARTIAL_MIN_EVENTS = 8
"""Output events an in-flight stream needs before its pace so far counts as a TPOT value."""


def pace(progress: StreamProgress, now: float) -> float | None:
    """A stream's seconds per event so far (see the module doc); None before `PARTIAL_MIN_EVENTS`
    events."""
    first, last, events = progress.first_at, progress.last_at, progress.events
    if first is None or last is None or events < PARTIAL_MIN_EVENTS:
        return None
    return max((last - first) / (events - 1), (now - first) / events)
