"""What the real-engine evaluation runs, in which order (pure: no I/O).

Per workload, one repetition is every mode once: `direct` (clients straight at the engine), the
fixed limits, then the adaptive controller once per SLA level. Direct and fixed runs do not depend
on the SLA level (the level only judges their requests afterwards), so they run once per
repetition and each level's goodput is computed from the same records. Repetitions follow each
other (A B C D, A D C B, A B C D ...) so that drift in the machine's load falls on every mode alike, and a
workload's repetitions run back to back so that its unloaded latency (measured first) and its
loaded latency (the first direct run), which set the SLA levels, are from the same minutes.
Direct runs first in every repetition, so the levels are known before any adaptive run needs them;
the other modes run in reverse order in every other repetition, so that what a run leaves behind
does not fall on the same next mode every time. With a fixed order, of two controllers compared
the first one's tight run always followed a loose run and the second's a tight one; on chat-short
the second delivered more in 7 of 8 such pairs, whichever rule it ran.

The fixed limits are multiples of the engine's KV knee, by default an eighth and a quarter of the
knee, the knee and twice it: the knee is the concurrency at which the workload's requests fill the
KV cache (capacity / tokens per request, the shared prefix counted once), capped at the engine's
`max_num_seqs`; twice it shows whether throughput still rises past the knee (preemptions and all); a
`tight` level binds below the knee where latency rises well before the KV cache fills (TPOT with a
handful of sequences in the batch), and a quarter and an eighth of it give that level a fixed
reference to be judged against: without one, a cell the controller met was judged as one nothing can
meet, and with a quarter alone two such cells missed a TPOT target by 2-21% there while an eighth
met it (chat-short at 8 and 4, chat-long-prompt at 3 and 1, on the real engine). Four limits, not a
finer sweep, keep the default matrix under two hours with runs long enough for a controller to
converge from its initial limit.

`estimate_s` is the wall time a plan will take, printed before it starts: each run's load plus the
drain of its last streams and the start of a gateway and the engine going idle, which the
measured runs on this machine put at about a quarter of the drain limit plus 4 s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from loadtests.controller.matrix import Level, Workload

FIXED_FACTORS = (0.125, 0.25, 1.0, 2.0)
RUN_OVERHEAD_S = 4.0
"""A gateway's start and the wait for the engine to be idle, per run (measured)."""
DRAIN_SHARE = 0.25
"""The share of the drain limit a run waits on average for its last streams (measured)."""


@dataclass(frozen=True, slots=True)
class Controller:
    """An adaptive controller to judge: an algorithm with parameters, named by `label`."""

    label: str
    algorithm: str
    params: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Controller:
        """`sla`, or `LABEL=ALGORITHM{JSON params}` (e.g. `u95=sla{"increase_below": 0.95}`) to run
        one algorithm with other parameters beside it, interleaved in the same repetitions."""
        label, _, spec = text.partition("=")
        if not spec:
            return cls(text, text)
        algorithm, brace, params = spec.partition("{")
        return cls(label, algorithm, json.loads(brace + params) if brace else {})


@dataclass(frozen=True, slots=True)
class Mode:
    name: str
    """`direct`, `fixed-N` or `<controller label>-<level>`."""
    algorithm: str | None = None
    """None straight to the engine; `fixed` or the adaptive algorithm's name through the gateway."""
    limit: int | None = None
    level: Level | None = None
    controller: Controller | None = None
    """The adaptive controller of an adaptive mode."""


@dataclass(frozen=True, slots=True)
class Run:
    workload: Workload
    repetition: int
    mode: Mode


def kv_knee(workload: Workload, kv_tokens: int, max_num_seqs: int) -> float:
    """Concurrency at which the workload's requests fill the KV cache, at most max_num_seqs."""
    prompt = sum(workload.prompt_tokens) / 2 - workload.shared_prefix_tokens
    per_request = max(1.0, prompt + sum(workload.output_tokens) / 2)
    usable = kv_tokens - workload.shared_prefix_tokens
    return min(float(max_num_seqs), max(1.0, usable / per_request))


def fixed_limits(
    workload: Workload, kv_tokens: int, max_num_seqs: int, factors: Sequence[float] = FIXED_FACTORS
) -> list[int]:
    """The fixed sweep: distinct limits at `factors` times the KV knee, ascending."""
    knee = kv_knee(workload, kv_tokens, max_num_seqs)
    return sorted({max(1, round(knee * f)) for f in factors})


def modes(
    limits: Sequence[int],
    levels: Sequence[Level],
    controllers: Sequence[Controller],
    only: Sequence[str] = (),
) -> list[Mode]:
    """One repetition's modes in their order; `only` keeps the kinds named (direct, fixed, adaptive)."""
    out = [Mode("direct")]
    out += [Mode(f"fixed-{n}", "fixed", n) for n in limits]
    out += [
        Mode(f"{c.label}-{level}", c.algorithm, level=level, controller=c)
        for level in levels
        for c in controllers
    ]
    if not only:
        return out
    return [m for m in out if _kind(m) in only]


def _kind(mode: Mode) -> str:
    if mode.algorithm is None:
        return "direct"
    return "fixed" if mode.algorithm == "fixed" else "adaptive"


def schedule(workload: Workload, mode_list: Sequence[Mode], repeat: int) -> list[Run]:
    """The workload's runs interleaved: every mode once per repetition, repetitions in turn, the
    modes after the first in reverse order in every other repetition."""
    first, rest = list(mode_list[:1]), list(mode_list[1:])
    return [
        Run(workload, rep, mode)
        for rep in range(repeat)
        for mode in first + (rest[::-1] if rep % 2 else rest)
    ]


def estimate_s(
    runs: int, workloads: int, warmup_s: float, window_s: float, drain_s: float, unloaded_s: float
) -> float:
    """Expected wall time of `runs` runs over `workloads` workloads, each with its unloaded run."""
    per_run = warmup_s + window_s + DRAIN_SHARE * drain_s + RUN_OVERHEAD_S
    return runs * per_run + workloads * (unloaded_s + RUN_OVERHEAD_S)
