"""k, the output tokens a stream's event carries, learned from the streams that finished.

vLLM sends one event per token until its front end falls behind; then it merges a stream's pending
deltas into one event (v1 `RequestOutputCollector`), so on a busy host an event carries several
tokens, and a pace per event would read TPOT k times too slow: misses at limits that meet the
target. A stream's token count is known only when it ends (from `usage`), so k is learned from
finished streams: their tokens over their events, as decayed sums,

    k = sum_i w_i tokens_i / sum_i w_i events_i,    w_i = (1 - 1/`EVENT_MEMORY`)^(streams after i)

so that k follows the front end as it falls behind and catches up, mostly on its newest
`EVENT_MEMORY` streams.
"""

from __future__ import annotations

EVENT_MEMORY = 50
"""Finished streams the tokens-per-event estimate mostly rests on."""


class TokensPerEvent:
    """Output tokens per stream event (see the module doc); None before any stream finished."""

    def __init__(self, memory: int = EVENT_MEMORY) -> None:
        self._keep = 1.0 - 1.0 / memory
        self._tokens = 0.0
        self._events = 0.0

    def learn(self, events: int, tokens: int) -> None:
        """A stream ended after `events` output events carrying `tokens` tokens."""
        if events > 0 and tokens > 0:
            self._tokens = self._keep * self._tokens + tokens
            self._events = self._keep * self._events + events

    @property
    def value(self) -> float | None:
        return self._tokens / self._events if self._events > 0 else None
