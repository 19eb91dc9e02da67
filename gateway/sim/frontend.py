"""The API server in front of the engine: where a request waits before the engine counts it, and
how its tokens reach the client. Pure: callers pass the time.

    ready = max(arrival + hold, busy_until) + busy,   busy_until <- ready

`hold` is a delay every request pays in parallel (parsing, tokenizing, a CPU-starved host's
scheduling lag): no concurrency limit in front of the server changes it, so it is a latency floor.
`busy` is host time spent on each request one at a time (a single-threaded front end): requests
queue for it before the engine sees them, so the engine's running + waiting counts miss them.
Tokens leave in bursts of `burst` (the last burst may be shorter): a busy front end's output
collector merges the tokens of several engine steps into one write.
Why a model at all: a real vLLM CPU engine on a busy 2-core host, measured through this gateway,
showed a proxy TTFT of 1-1.5 s at one request in flight while vLLM's own TTFT histogram said 0.02 s
(docs/real-vllm.md: the front end shares a core and delivers a stream's tokens in bursts).
"""

from __future__ import annotations


class FrontEnd:
    """When each request reaches the engine, and which of its tokens the client has been sent."""

    def __init__(self, hold: float = 0.0, busy: float = 0.0, burst: int = 1) -> None:
        if hold < 0 or busy < 0:
            raise ValueError("front end hold and busy must be >= 0")
        if burst < 1:
            raise ValueError(f"stream burst must be >= 1, got {burst}")
        self.hold = hold
        self.busy = busy
        self.burst = burst
        self._busy_until = 0.0

    def ready_at(self, arrival: float) -> float:
        """The time a request arriving at `arrival` is handed to the engine (call in arrival order)."""
        start = max(arrival + self.hold, self._busy_until)
        self._busy_until = start + self.busy
        return self._busy_until

    def delivers(self, produced: int, finished: bool) -> bool:
        """Whether the token just produced (the `produced`-th) goes out now with those before it."""
        return finished or produced % self.burst == 0
