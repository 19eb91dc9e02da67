"""What the client-side SLA benchmark runs, in which order, and with which client arguments (pure).

A cell is one load: open loop at a multiple of the engine's measured capacity (requests/s) with a
burstiness (1 is Poisson; 0.25 is a gamma process with a coefficient of variation of 2, bursts and
lulls), or closed loop with a multiple of the engine's `max_num_seqs` as the client's concurrency.
Every cell runs each target once per repetition, in turn (direct, fixed, gateway), and the
repetitions follow each other, so that a drift in the shared machine's load falls on every target
alike. The runs of one cell and repetition share one seed, so they send the same prompts at the same
arrival times; repetitions differ in their seed. A run sends `rate x duration` requests in the open
loop (the client spreads them over about `duration` seconds) and `capacity x duration` requests,
at least twice the concurrency, in the closed loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

TARGETS = ("direct", "fixed", "gateway")
CANDIDATE = "candidate"
"""The gateway from another checkout (a branch under test), run beside this one's in every repetition."""
Loop = Literal["open", "closed"]


@dataclass(frozen=True, slots=True)
class Cell:
    loop: Loop
    factor: float
    """Open loop: arrival rate / capacity. Closed loop: concurrency / max_num_seqs."""
    burstiness: float = 1.0
    """Open loop only: vllm bench serve's `--burstiness` (1: Poisson)."""

    @property
    def name(self) -> str:
        if self.loop == "closed":
            return f"closed {self.factor:g}x"
        shape = "poisson" if self.burstiness == 1.0 else f"burst {self.burstiness:g}"
        return f"open {self.factor:g}x {shape}"

    @property
    def overloaded(self) -> bool:
        return self.factor > 1.0


@dataclass(frozen=True, slots=True)
class Run:
    cell: Cell
    target: str
    repetition: int
    seed: int


@dataclass(frozen=True, slots=True)
class Workload:
    """The random dataset's lengths and the SLOs, as vllm bench serve takes them."""

    input_len: int = 200
    output_len: int = 120
    ttft_ms: float = 1500.0
    tpot_ms: float = 150.0


def cells(
    factors: Sequence[float], burstiness: Sequence[float], loops: Sequence[Loop] = ("open", "closed")
) -> list[Cell]:
    """Open-loop cells for every factor and burstiness, then closed-loop cells for every factor."""
    out: list[Cell] = []
    if "open" in loops:
        out += [Cell("open", f, b) for b in burstiness for f in factors]
    if "closed" in loops:
        out += [Cell("closed", f) for f in factors]
    return out


def schedule(
    cell_list: Sequence[Cell], repeat: int, targets: Sequence[str] = TARGETS, base_seed: int = 1
) -> list[Run]:
    """Every cell's repetitions in turn; within one, every target once, on the same seed."""
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    runs = []
    for c, cell in enumerate(cell_list):
        for rep in range(1, repeat + 1):
            seed = base_seed + 1000 * c + rep
            runs += [Run(cell, target, rep, seed) for target in targets]
    return runs


def requests_for(cell: Cell, capacity: float, max_num_seqs: int, duration_s: float) -> int:
    if cell.loop == "open":
        return max(1, round(cell.factor * capacity * duration_s))
    return max(2 * concurrency_for(cell, max_num_seqs), round(capacity * duration_s))


def concurrency_for(cell: Cell, max_num_seqs: int) -> int:
    return max(1, math.ceil(cell.factor * max_num_seqs))


def client_args(
    base_url: str,
    model: str,
    tokenizer: str,
    workload: Workload,
    num_prompts: int,
    seed: int,
    *,
    rate: float | None = None,
    burstiness: float = 1.0,
    concurrency: int | None = None,
) -> list[str]:
    """vllm bench serve's arguments for one run: open loop at `rate`, or closed at `concurrency`."""
    argv = [
        "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "random",
        "--random-input-len", str(workload.input_len), "--random-output-len", str(workload.output_len),
        "--num-prompts", str(num_prompts), "--seed", str(seed),
        "--goodput", f"ttft:{workload.ttft_ms:g}", f"tpot:{workload.tpot_ms:g}",
        "--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "50,90,99",
        "--temperature", "0", "--disable-tqdm", "--save-result", "--save-detailed",
    ]  # fmt: skip
    if rate is not None:
        argv += ["--request-rate", f"{rate:.4f}", "--burstiness", f"{burstiness:g}"]
    if concurrency is not None:
        argv += ["--max-concurrency", str(concurrency)]
    return argv
