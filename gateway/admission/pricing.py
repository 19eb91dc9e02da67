"""What a unit of service costs in the fair queue: tokens (the Virtual Token Counter) or requests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Cost = Literal["tokens", "requests"]


@dataclass(frozen=True, slots=True)
class Pricing:
    """What one unit of service costs.

    `prompt` and `output` are the Virtual Token Counter's w_p and w_q; the default 1 and 2 follow
    the paper: a prompt token is processed in one parallel, compute-bound prefill pass, while each
    output token takes its own memory-bound decode step and holds its KV blocks for the rest of the
    answer, so an output token costs the engine about twice a prompt token. `cost="requests"` makes
    every request cost one unit whatever its tokens: plain weighted fair queueing of requests.
    """

    cost: Cost = "requests"
    prompt: float = 1.0
    output: float = 2.0

    def __post_init__(self) -> None:
        if not (self.prompt >= 0 and self.output >= 0 and self.prompt + self.output > 0):
            raise ValueError(f"token prices must be >= 0 and not both 0, got {self.prompt}, {self.output}")

    @property
    def by_tokens(self) -> bool:
        return self.cost == "tokens"

    def dispatch(self, prompt_tokens: float) -> float:
        """The price charged when a request with this (estimated) prompt is dispatched."""
        return self.prompt * prompt_tokens if self.by_tokens else 1.0
