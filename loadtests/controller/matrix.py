"""The controller evaluation matrix: workloads x SLA levels, the same on the simulator and on vLLM.

A cell is one workload under one SLA level. Every cell is run straight at the backend (`direct`),
through a sweep of fixed limits, and through the adaptive controller, the modes interleaved and
repeated so that drift in the machine's load falls on all of them alike.

Workloads differ where a controller tuned for one could fail on another: prompt and output lengths
(prefill-bound vs decode-bound), distinct vs shared prefixes (the prefix cache moves the KV knee),
chat vs completions, streaming vs not (a non-streaming request gives the proxy no first token).
A user's own workload comes as a one-line spec (`parse`), so the controller can be judged on
traffic it was not tuned for without editing this module.

SLA levels are set per workload from two P90s of the same run, so that one definition means the
same on engines of any speed and on workloads whose latency grows with load at different rates:
the unloaded P90 (one client straight at the engine, measured first) and the loaded P90 (the
workload's first `direct` run: every client straight at the engine). Per signal:
- `loose` = 1.5 x loaded: even direct meets it, so the SLA does not bind and throughput decides;
- `tight` = sqrt(unloaded x loaded), the geometric mean: between the two on a log scale (latency
  grows roughly geometrically with concurrency), so some limits meet it and the rest do not, and
  goodput against the best fixed limit that meets it decides;
- `infeasible` = 0.5 x unloaded: below what one request alone gets, so no limit meets it and the
  controller must say so and hold the limit with the most throughput instead of starving the
  backend.
A streaming workload is judged on TTFT and TPOT P90, a non-streaming one on end-to-end P90. The SLA
is judged from dispatch (a gateway's queue wait excluded); direct has no gateway queue, so its
loaded P90 includes the engine's own queue, the latency a client without a gateway meets.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

Endpoint = Literal["chat", "completions"]
Level = Literal["loose", "tight", "infeasible"]
LEVELS: tuple[Level, ...] = ("loose", "tight", "infeasible")
DEFAULT_CLIENTS = 64


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
    clients: int = DEFAULT_CLIENTS
    """Closed-loop clients: well past the knee of the engines this runs on."""


WORKLOADS: tuple[Workload, ...] = (
    Workload("chat-short", "chat", True, (48, 96), (48, 96)),
    Workload("chat-long-prompt", "chat", True, (600, 760), (96, 160)),
    Workload("completions-long-output", "completions", True, (96, 160), (360, 440)),
    Workload("chat-shared-prefix", "chat", True, (660, 700), (120, 180), shared_prefix_tokens=600),
    Workload("completions-nonstream", "completions", False, (200, 300), (160, 240)),
    # Longest prompt + output + the chat template stay within the engine's max_model_len of 1,024,
    # so no request is cut short of the length it was drawn with.
    Workload("chat-nonstream-mixed", "chat", False, (40, 560), (16, 400)),
)

LOOSE_OVER_LOADED = 1.5
INFEASIBLE_OVER_UNLOADED = 0.5


def level_target(level: Level, unloaded: float, loaded: float) -> float:
    """One signal's target in seconds at `level`, from its unloaded and loaded P90s."""
    if level == "loose":
        return LOOSE_OVER_LOADED * loaded
    if level == "tight":
        return math.sqrt(unloaded * loaded)
    return INFEASIBLE_OVER_UNLOADED * unloaded


def targets(
    workload: Workload, level: Level, unloaded: Mapping[str, float], loaded: Mapping[str, float]
) -> dict[str, float]:
    """The SLA targets in seconds for `workload` at `level`, from its unloaded and loaded P90s.

    A streaming workload gets TTFT and TPOT targets, a non-streaming one an end-to-end target; a
    signal missing from either measurement gets none.
    """
    signals = ("ttft", "tpot") if workload.stream else ("e2e",)
    return {s: level_target(level, unloaded[s], loaded[s]) for s in signals if s in unloaded and s in loaded}


def parse(spec: str) -> Workload:
    """A workload of the user's own, `NAME:ENDPOINT:stream|nonstream:PROMPT:OUTPUT[:prefix=N][:clients=N]`,
    PROMPT and OUTPUT a token count N or a range LO-HI, e.g. `rag:chat:stream:900-1000:20-60:prefix=800`.

    Raises ValueError naming what is wrong, so the command line can say it.
    """
    name, *fields = spec.split(":")
    if not name or len(fields) < 4:
        raise ValueError(f"workload {spec!r}: want NAME:ENDPOINT:stream|nonstream:PROMPT:OUTPUT[:key=N]...")
    endpoint, mode, prompt, output, *options = fields
    if endpoint not in ("chat", "completions"):
        raise ValueError(f"workload {name!r}: endpoint {endpoint!r} is not chat or completions")
    if mode not in ("stream", "nonstream"):
        raise ValueError(f"workload {name!r}: {mode!r} is not stream or nonstream")
    extra: dict[str, int] = {}
    for option in options:
        key, _, value = option.partition("=")
        if key not in ("prefix", "clients") or not value.isdigit():
            raise ValueError(f"workload {name!r}: option {option!r} is not prefix=N or clients=N")
        extra[key] = int(value)
    workload = Workload(
        name,
        cast(Endpoint, endpoint),
        mode == "stream",
        _token_range(name, "prompt", prompt),
        _token_range(name, "output", output),
        shared_prefix_tokens=extra.get("prefix", 0),
        clients=extra.get("clients", DEFAULT_CLIENTS),
    )
    if workload.shared_prefix_tokens > workload.prompt_tokens[0]:
        raise ValueError(f"workload {name!r}: the shared prefix exceeds the shortest prompt")
    if workload.clients < 1:
        raise ValueError(f"workload {name!r}: no clients")
    return workload


def argument(text: str) -> Workload:
    """`parse` for argparse: its error is the command line's message."""
    try:
        return parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _token_range(name: str, what: str, text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    high = high or low
    if not (low.isdigit() and high.isdigit() and 0 < int(low) <= int(high)):
        raise ValueError(f"workload {name!r}: {what} {text!r} is not N or LO-HI tokens")
    return int(low), int(high)


def by_name(name: str) -> Workload:
    for w in WORKLOADS:
        if w.name == name:
            return w
    raise KeyError(f"unknown workload {name!r}; known: {', '.join(w.name for w in WORKLOADS)}")


def selected(names: Sequence[str] | None, own: Sequence[Workload]) -> list[Workload]:
    """The built-in workloads `names` (all of them when None and no workload of one's own is given,
    none when one is) followed by `own`."""
    if names is None:
        names = [] if own else [w.name for w in WORKLOADS]
    return [by_name(n) for n in names] + list(own)
