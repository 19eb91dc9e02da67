"""Throughput, goodput and P90s of a load run from its per-request records (pure arithmetic).

Tokens are counted where they were delivered inside the steady window [begin, end):
- a streaming request's `usage` tokens are spread evenly between its first and last token (vLLM
  merges several tokens into one chunk when its front end falls behind, so chunk times are not
  token times); the share that falls in the window counts;
- a non-streaming request shows nothing until it ends, so all its tokens count at its end.
In steady load both are unbiased estimates of the rate, and neither needs the requests still
running at the end of the window to finish.

Goodput counts the same tokens, but only of requests that meet every target. The latency a target
judges is the one the gateway's SLA is defined on: from dispatch to the backend, that is the
client's time minus the wait in the gateway's queue (the `x-gateway-queue-wait` header; zero
straight to the engine). A closed loop with more clients than the engine can serve queues
somewhere whatever the limit; what differs between modes is whether the queue is in the engine,
where it costs every admitted request latency, or before it. TPOT is (last - first token) /
(tokens - 1) and is not affected by the queue.

P90s (nearest rank, the gateway's definition) are over the requests that finished after the
warm-up, so the controller had that long to settle, and were sent before the load stopped (streams
that were generating then and finished in the drain count; nothing sent later exists). Judging by
the end rather than the start keeps long non-streaming requests: few that start in a short window
also end in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from loadtests.stats import p90

SIGNALS = ("ttft", "tpot", "e2e")


class Record(Protocol):
    stream: bool
    start: float
    first_token: float | None
    last_token: float | None
    end: float | None
    completion_tokens: int
    queue_wait: float
    finished: bool
    status: int
    error: str


def ok(record: Record) -> bool:
    return record.finished and record.status == 200 and not record.error


def latencies(record: Record) -> dict[str, float]:
    """The record's latencies as the SLA judges them (see the module docstring)."""
    out: dict[str, float] = {}
    if not ok(record) or record.end is None:
        return out
    out["e2e"] = record.end - record.start - record.queue_wait
    if record.first_token is not None:
        out["ttft"] = record.first_token - record.start - record.queue_wait
        if record.last_token is not None and record.completion_tokens > 1:
            out["tpot"] = (record.last_token - record.first_token) / (record.completion_tokens - 1)
    return out


def meets(record: Record, targets: Mapping[str, float]) -> bool:
    """True when the request finished and each targeted latency is at or under its target."""
    values = latencies(record)
    if not values:
        return False
    return all(signal in values and values[signal] <= target for signal, target in targets.items())


def window_tokens(record: Record, begin: float, end: float) -> float:
    """The record's tokens delivered in [begin, end)."""
    if not ok(record) or record.end is None:
        return 0.0
    tokens = float(record.completion_tokens)
    if not record.stream or record.first_token is None or record.last_token is None:
        return tokens if begin <= record.end < end else 0.0
    span = record.last_token - record.first_token
    if span <= 0:
        return tokens if begin <= record.first_token < end else 0.0
    overlap = min(end, record.last_token) - max(begin, record.first_token)
    return tokens * max(0.0, overlap) / span


def tokens_per_s(
    records: Iterable[Record], begin: float, end: float, targets: Mapping[str, float] | None = None
) -> float:
    """Output tokens/s in the window; with `targets`, only of requests meeting all of them."""
    total = sum(window_tokens(r, begin, end) for r in records if targets is None or meets(r, targets))
    return total / max(1e-9, end - begin)


def p90s(records: Sequence[Record], begin: float, end: float) -> dict[str, float]:
    """P90 of each latency over requests sent before `end` that finished at or after `begin`."""
    values: dict[str, list[float]] = {s: [] for s in SIGNALS}
    for record in records:
        if record.start < end and record.end is not None and record.end >= begin:
            for signal, value in latencies(record).items():
                values[signal].append(value)
    out: dict[str, float] = {}
    for signal, vs in values.items():
        p = p90(vs)
        if p is not None:
            out[signal] = p
    return out
