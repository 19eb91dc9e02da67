"""How many sequences of the current request mix one backend's KV cache can hold.

    capacity   = num_gpu_blocks x block_size, from vllm:cache_config_info (the latest scrape)
    footprint  = kv_usage x capacity / running, smoothed per scrape (weight FOOTPRINT_SMOOTHING)
    tokens     = prompt + output tokens per finished request, smoothed (weight TOKENS_SMOOTHING)
    kv ceiling = floor(capacity / footprint), or floor(capacity / tokens) before any footprint
    whole-request ceiling = floor(capacity / tokens)
    ceiling    = max(floor, min(max_limit, kv ceiling)), max_limit without KV information

Rules:
- The measured footprint comes first, because the arithmetic on tokens per request assumes every
  request holds its whole prompt and output at once and shares nothing; in steady state a request
  holds about its prompt and half its output, and the prefix cache shares identical prefixes. At
  saturation capacity / footprint equals `running`: exactly how many of the current mix fit.
- Tokens per request is the cold-start bound, used until the engine has been seen running requests.
- The whole-request ceiling is how many requests fit when each has grown to its full prompt and
  output at once: below it vLLM never runs out of blocks mid-request, so it never preempts (evicts
  the newest running request, whose prompt is then computed again). Batch lines beside interactive
  traffic stay under it (gateway.backends); the limit does not, as steady state fits more. Where
  answers do not say their prompt tokens (streams without usage) the mean is too small and this
  ceiling too high, so they stay under the footprint one as well.
- A scrape with no usage or nothing running says nothing about the footprint and leaves it as is.
- The ceiling never goes below the floor: the backend always gets at least its floor of requests.
"""

from __future__ import annotations

import math

from gateway.types import EngineStats

TOKENS_SMOOTHING = 0.05
"""EWMA weight of one finished request in the tokens-per-request estimate (about 20 requests)."""
FOOTPRINT_SMOOTHING = 0.2
"""EWMA weight of one scrape in the measured KV footprint per running sequence."""


class KVCeiling:
    """KV capacity, footprint per running sequence and tokens per request of one backend."""

    def __init__(self) -> None:
        self._capacity: int | None = None
        self._per_running: float | None = None
        self._tokens_per_request: float | None = None

    @property
    def capacity(self) -> int | None:
        """KV-cache tokens of the backend, if its scrape said."""
        return self._capacity

    @property
    def per_running(self) -> float | None:
        """Smoothed KV tokens held per running sequence, once measured."""
        return self._per_running

    @property
    def tokens_per_request(self) -> float | None:
        """Smoothed prompt + output tokens per finished request."""
        return self._tokens_per_request

    def observe(self, stats: EngineStats) -> None:
        """Take the capacity and the footprint per running sequence from one scrape."""
        if stats.kv_capacity_tokens is not None and stats.kv_capacity_tokens > 0:
            self._capacity = stats.kv_capacity_tokens
        running = stats.running
        if (
            self._capacity is not None
            and stats.kv_usage is not None
            and stats.kv_usage > 0
            and running is not None
            and running >= 1
        ):
            footprint = stats.kv_usage * self._capacity / running
            prev = self._per_running
            self._per_running = footprint if prev is None else prev + FOOTPRINT_SMOOTHING * (footprint - prev)

    def add_request(self, tokens: int) -> None:
        """A request finished well holding `tokens` prompt + output tokens."""
        if tokens > 0:
            prev = self._tokens_per_request
            self._tokens_per_request = (
                float(tokens) if prev is None else prev + TOKENS_SMOOTHING * (tokens - prev)
            )

    def kv_ceiling(self) -> int | None:
        """Concurrency the KV cache can hold at the observed request footprint, if known."""
        if self._capacity is None:
            return None
        footprint = self._per_running or self._tokens_per_request
        if footprint is None or footprint <= 0:
            return None
        return math.floor(self._capacity / footprint)

    def whole_request_ceiling(self) -> int | None:
        """Concurrency the KV cache holds with every request at its full prompt + output, if known."""
        if self._capacity is None or not self._tokens_per_request:
            return None
        return math.floor(self._capacity / self._tokens_per_request)

    def bound(self, floor: int, max_limit: int) -> int:
        """The ceiling: `max_limit`, lowered to the KV ceiling when known, never below `floor`."""
        kv = self.kv_ceiling()
        if kv is None:
            return max_limit
        return max(floor, min(max_limit, kv))
