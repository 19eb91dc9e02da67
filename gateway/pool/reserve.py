"""Room for batch lines on one backend: the slots interactive traffic leaves them.

Batch lines (background leases) may hold at most `limit - reserve` slots of a backend, the reserve
being the most interactive requests it had in flight over the last `interactive_horizon` seconds:
a batch takes the capacity interactive traffic leaves, and an interactive request arriving at its
usual rate finds a slot free instead of waiting for a batch line to end. While there is such
traffic (a reserve above 0), the batch also stays within what the backend's KV cache holds less
the reserve, counting every request at its full prompt + output (gateway.control.ceiling), and
within the KV ceiling at the measured footprint, where the limit may be above either (the `sla`
algorithm runs there when that pays). Past the footprint ceiling vLLM queues what it is sent, so
an interactive request would wait in vLLM's queue behind batch lines; past the full-size one the
requests outgrow the cache as they decode, and vLLM preempts the newest running request (often an
interactive one, which then computes its prompt again). With no interactive traffic, the batch
runs up to the limit, where vLLM's own queue keeps its KV cache full. The limit is the one the
algorithm controls, without the room the limiter gives a burst after a quiet spell: that room is
for requests that arrive together and must be served now, and a batch is neither (taken by a
batch, it sent a fresh gateway's 200 lines to the engine at once).
"""

from __future__ import annotations

from gateway.control.limiter import Limiter
from gateway.control.window import SlidingMax

PEAK_GRAIN = 1.0
"""Seconds per high of interactive requests in flight: the hot path keeps only a running max, and
batch admissions roll it into the horizon's window once per this."""


class InteractiveReserve:
    """One backend's recent peak of interactive requests in flight, and the room it leaves batch lines."""

    def __init__(self, horizon: float) -> None:
        self._peak = SlidingMax(horizon)
        """Per-second highs of interactive requests in flight over the horizon."""
        self._high = 0
        """The most interactive requests in flight since the last second was rolled in."""
        self._rolled_at = -PEAK_GRAIN

    def admitted(self, interactive: int) -> None:
        """An interactive request took a slot, leaving `interactive` in flight."""
        if interactive > self._high:
            self._high = interactive

    def background_room(self, now: float, limiter: Limiter, background_inflight: int) -> int:
        """Slots a batch line may take: the controlled limit (with interactive traffic, at most what
        the KV cache holds, with requests at their full size) less the reserve and the batch's own
        lines."""
        reserve = self._reserve(now, limiter.inflight - background_inflight)
        bound = limiter.controlled
        if reserve:
            for kv in (limiter.kv_ceiling(), limiter.whole_request_ceiling()):
                if kv is not None and kv < bound:
                    bound = kv
        return bound - reserve - background_inflight

    def _reserve(self, now: float, interactive: int) -> int:
        """The most interactive requests in flight over the horizon, rolling the running high into
        the window once per `PEAK_GRAIN`."""
        if now - self._rolled_at >= PEAK_GRAIN:
            self._peak.add(now, self._high)
            self._high = interactive
            self._rolled_at = now
        return max(self._high, int(self._peak.value(now) or 0))
