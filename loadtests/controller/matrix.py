"""The controller evaluation matrix: workloads x SLA levels, the same on the simulator and on vLLM.

A cell is one workload under one SLA level. Every cell is run straight at the backend (`direct`),
through a sweep of fixed limits, and through the adaptive controller, the modes interleaved and
repeated so that drift in the machine's load falls on all of them alike.

Workloads differ where a controller tuned for one could fail on another: prompt and output lengths
(prefill-bound vs decode-bound), distinct vs shared prefixes (the prefix cache moves the KV knee),
chat vs completions, streaming vs not (a non-streaming request gives the proxy no first token).

SLA levels are set per workload from its own unloaded latency (one client, measured first in the
same run), so that one definition binds on engines of any speed:
- `loose`: far above the unloaded latency; the SLA rarely binds and throughput decides;
- `tight`: a small multiple of it, so the knee of the latency curve binds;
- `infeasible`: below it, so no limit can meet it and the controller must say so and hold the
  limit with the most throughput instead of starving the backend.
A streaming workload is judged on TTFT and TPOT P90, a non-streaming one on end-to-end P90.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Endpoint = Literal["chat", "completions"]
Level = Literal["loose", "tight", "infeasible"]
LEVELS: tuple[Level, ...] = ("loose", "tight", "infeasible")


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    endpoint: Endpoint
    stream: bool
    prompt_tokens: tuple[int, int]
    """Range of prompt lengths in tokens (uniform); equal ends for a fixed length."""
    output_tokens: tuple[int, int]
    """Range of `max_tokens` (uniform), sent with `ignore_eos` so each request generates all of it."""
    shared_prefix_tokens: int = 0
    """Tokens at the start of every prompt that all requests share (a system prompt, a document)."""
    clients: int = 64
    """Closed-loop clients: well past the knee of the engines this runs on."""


@dataclass(frozen=True, slots=True)
class SLALevel:
    """Targets as multiples of the workload's unloaded P90 (measured with one client)."""

    ttft: float | None
    tpot: float | None
    e2e: float | None


WORKLOADS: tuple[Workload, ...] = (
    Workload("chat-short", "chat", True, (48, 96), (48, 96)),
    Workload("chat-long-prompt", "chat", True, (600, 760), (96, 160)),
    Workload("completions-long-output", "completions", True, (96, 160), (360, 440)),
    Workload("chat-shared-prefix", "chat", True, (660, 700), (120, 180), shared_prefix_tokens=600),
    Workload("completions-nonstream", "completions", False, (200, 300), (160, 240)),
    Workload("chat-nonstream-mixed", "chat", False, (40, 800), (16, 400)),
)

SLA_LEVELS: dict[Level, SLALevel] = {
    # TTFT grows fastest with load (queueing before prefill); TPOT and e2e more slowly.
    "loose": SLALevel(ttft=20.0, tpot=4.0, e2e=6.0),
    "tight": SLALevel(ttft=5.0, tpot=2.0, e2e=2.5),
    "infeasible": SLALevel(ttft=0.5, tpot=0.5, e2e=0.5),
}


def targets(workload: Workload, level: Level, unloaded: dict[str, float]) -> dict[str, float]:
    """The SLA targets in seconds for `workload` at `level`, from its unloaded P90s by signal.

    A streaming workload gets TTFT and TPOT targets, a non-streaming one an end-to-end target.
    """
    factors = SLA_LEVELS[level]
    signals = ("ttft", "tpot") if workload.stream else ("e2e",)
    out: dict[str, float] = {}
    for signal in signals:
        factor = getattr(factors, signal)
        if factor is not None and signal in unloaded:
            out[signal] = factor * unloaded[signal]
    return out


def by_name(name: str) -> Workload:
    for w in WORKLOADS:
        if w.name == name:
            return w
    raise KeyError(f"unknown workload {name!r}; known: {', '.join(w.name for w in WORKLOADS)}")
