"""How many sequences of the current request mix one backend's KV cache can hold.

    capacity   = num_gpu_blocks x block_size, from vllm:cache_config_info (the latest scrape)
    footprint  = kv_usage x capacity / running, smoothed per scrape (weight FOOTPRINT_SMOOTHING)
    tokens     = prompt + output tokens per finished request, smoothed (weight TOKENS_SMOOTHING),
                 and prompt = its prompt tokens alone
    shared     = hit share x prompt, the hit share being the prefix cache's hits / queries (tokens)
                 per scrape, smoothed (weight HIT_SHARE_SMOOTHING); 0 before any
    kv ceiling = floor(capacity / footprint), or floor(capacity / tokens) before any footprint
    declared   = the mean prompt (estimated) + max_tokens of the requests sent that say
    whole-request ceiling = floor((capacity - shared) / max(1, tokens - shared))
    burst ceiling = the whole-request ceiling, or floor(capacity / declared) before any request
                 has finished
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
  traffic stay under it (gateway.pool.backends); the limit does not, as steady state fits more. Where
  answers do not say their prompt tokens (streams without usage) the mean is too small and this
  ceiling too high, so they stay under the footprint one as well.
- Before any request has finished, the sizes requests declare say how many a burst may bring in
  at once (the burst room, gateway.control.room): a fresh gateway takes its first burst where the cache holds
  it instead of at its first limit, which on the real CPU engine waited 2-4 s for answers with
  arrivals queued in the gateway. Only there: the prompt is estimated from its characters, which
  for random-token text read 140 tokens of 200, so the algorithm grows on measured sizes alone.
- A prompt's tokens that the prefix cache holds are a prefix the running requests share, held once
  (a system prompt, a document): requests of 830 tokens whose first 512 the cache holds fit whole
  9 at a time in 8,192 tokens counted each on its own, and 24 with the prefix held once. Hits on a
  prefix no other running request holds (an earlier turn of the same conversation) make the
  ceiling too high; the footprint one, measured, is not.
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
HIT_SHARE_SMOOTHING = 0.2
"""EWMA weight of one scrape in the share of prompt tokens the prefix cache found."""


class KVCeiling:
    """KV capacity, footprint per running sequence and tokens per request of one backend."""

    def __init__(self) -> None:
        self._capacity: int | None = None
        self._per_running: float | None = None
        self._tokens_per_request: float | None = None
        self._prompt_per_request: float | None = None
        self._declared = (0, 0)  # tokens and requests declared
        self._hit_share = 0.0

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
            self._per_running = smoothed(self._per_running, footprint, FOOTPRINT_SMOOTHING)
        if stats.prefix_hit_share is not None:
            self._hit_share = smoothed(self._hit_share, stats.prefix_hit_share, HIT_SHARE_SMOOTHING)

    def add_request(self, prompt: int, output: int) -> None:
        """A request finished well holding `prompt` + `output` tokens."""
        if prompt + output > 0:
            self._tokens_per_request = smoothed(self._tokens_per_request, prompt + output, TOKENS_SMOOTHING)
            self._prompt_per_request = smoothed(self._prompt_per_request, prompt, TOKENS_SMOOTHING)

    def declared(self, tokens: int) -> None:
        """A request was sent that holds at most `tokens` (its prompt and its max_tokens)."""
        if tokens > 0:
            self._declared = (self._declared[0] + tokens, self._declared[1] + 1)

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
        shared = self._hit_share * (self._prompt_per_request or 0.0)
        return math.floor((self._capacity - shared) / max(1.0, self._tokens_per_request - shared))

    def burst_ceiling(self) -> int | None:
        """What a burst may bring in at once: the whole-request ceiling, or before any request has
        finished the one by what requests declared, if known."""
        whole = self.whole_request_ceiling()
        tokens, requests = self._declared
        if whole is not None or self._capacity is None or requests == 0:
            return whole
        return math.floor(self._capacity * requests / tokens)

    def bound(self, floor: int, max_limit: int) -> int:
        """The ceiling: `max_limit`, lowered to the KV ceiling when known, never below `floor`."""
        kv = self.kv_ceiling()
        if kv is None:
            return max_limit
        return max(floor, min(max_limit, kv))


def smoothed(previous: float | None, value: float, weight: float) -> float:
    """An EWMA step: `value` if there is no `previous`, else `weight` of the way from it to `value`."""
    return value if previous is None else previous + weight * (value - previous)
