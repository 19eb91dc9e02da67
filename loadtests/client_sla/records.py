"""One run's numbers from vllm bench serve's saved result and the answers noted beside it (pure).

The client's result (`--save-result --save-detailed`) holds its own summary (`request_goodput`:
requests meeting every SLO per second of the run, `completed`, `failed`, `p90_ttft_ms`,
`p90_tpot_ms` over the served requests) and per request `start_times`, `errors`, `ttfts`. A request
it counts as failed is split here by the noted HTTP status: 429 and 503 are refusals (the answer a
client is told to come back on), anything else a failure. A refusal is honest when it carries
`Retry-After` (or `retry-after-ms`). A request served after its budget ran out is one answered 200
whose wait in the gateway's queue (`x-gateway-queue-wait`) already exceeded the TTFT target, so it
could no longer meet it whatever the engine did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REFUSED = frozenset({429, 503})


@dataclass(frozen=True, slots=True)
class Summary:
    requests: int
    goodput: float
    """vllm bench serve's request goodput, req/s."""
    completed: int
    refused: int
    failed: int
    ttft_p90_ms: float
    tpot_p90_ms: float
    duration_s: float
    throughput: float
    refused_without_retry_after: int
    served_late: int
    """Answered 200 after waiting in the gateway's queue longer than the TTFT target."""
    resent: int
    """Requests the client sent more than once (it should never retry)."""
    unnoted: int
    """Requests of the result with no noted answer (the connection failed before any)."""

    @property
    def refused_share(self) -> float:
        return self.refused / self.requests if self.requests else 0.0

    @property
    def honest_refusals(self) -> bool:
        return self.refused_without_retry_after == 0


def summarize(result: Mapping[str, Any], notes: Sequence[Mapping[str, Any]], ttft_target_s: float) -> Summary:
    by_start = {float(n["start_time"]): n for n in notes}
    starts = [float(t) for t in result["start_times"]]
    errors = list(result["errors"])
    refused = failed = without = late = unnoted = 0
    for start, error in zip(starts, errors, strict=True):
        note = by_start.get(start)
        if note is None:
            unnoted += 1
        status = None if note is None else note.get("status")
        if status == 200 and _late(note, ttft_target_s):
            late += 1
        if status in REFUSED:
            refused += 1
            if not (note or {}).get("retry_after") and not (note or {}).get("retry_after_ms"):
                without += 1
        elif error:
            failed += 1
    return Summary(
        requests=len(starts),
        goodput=float(result.get("request_goodput") or 0.0),
        completed=int(result["completed"]),
        refused=refused,
        failed=failed,
        ttft_p90_ms=float(result.get("p90_ttft_ms", 0.0)),
        tpot_p90_ms=float(result.get("p90_tpot_ms", 0.0)),
        duration_s=float(result["duration"]),
        throughput=float(result["request_throughput"]),
        refused_without_retry_after=without,
        served_late=late,
        resent=sum(1 for n in notes if int(n.get("sends", 1)) > 1),
        unnoted=unnoted,
    )


def _late(note: Mapping[str, Any] | None, ttft_target_s: float) -> bool:
    wait = None if note is None else note.get("queue_wait")
    return wait is not None and float(wait) > ttft_target_s
