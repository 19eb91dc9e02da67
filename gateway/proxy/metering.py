"""One request's tokens, charged as they become known: to its tenant's place in the fair queue, to
its tenant's token quota, and, when it ends, to the usage ledger.

- At admission: the prompt's estimate (gateway.tenancy.estimate); the queue charges it when it
  dispatches the request, the quota when it admits it.
- As the answer streams: each new output token (`streamed`, called by gateway.proxy.upstream with
  the count of output events so far).
- At the end (`settle`): the backend's own counts, when its answer carried `usage`: the prompt's
  correction (reported - estimated) and the output's (reported - streamed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gateway.admission import Ticket
from gateway.tenancy.gate import Hold, QuotaGate
from gateway.types import Sample


class Chargeable(Protocol):
    def charge(self, ticket: Ticket, *, prompt: float = 0.0, output: float = 0.0) -> None: ...


@dataclass(eq=False, slots=True)
class Meter:
    ticket: Ticket
    queue: Chargeable
    gate: QuotaGate | None = None
    hold: Hold | None = None
    prompt: int = 0
    """Best known prompt tokens: the estimate until the backend reports its count."""
    output: int = 0
    """Output tokens charged so far."""
    reported: bool = False
    """The backend reported its counts (`usage`)."""

    def __post_init__(self) -> None:
        self.prompt = self.ticket.prompt_tokens

    def streamed(self, tokens: int) -> None:
        """`tokens` output tokens have arrived in all."""
        delta = tokens - self.output
        if delta > 0:
            self._charge(0, delta)

    def settle(self, sample: Sample | None) -> None:
        """The exchange ended; `sample` carries the backend's counts when it completed."""
        if sample is None:
            return
        prompt_delta = sample.prompt_tokens - self.prompt if sample.prompt_tokens > 0 else 0
        self.reported = sample.prompt_tokens > 0
        self._charge(prompt_delta, sample.output_tokens - self.output)

    def _charge(self, prompt: int, output: int) -> None:
        if not (prompt or output):
            return
        self.prompt += prompt
        self.output += output
        self.queue.charge(self.ticket, prompt=prompt, output=output)
        if self.gate is not None and self.hold is not None:
            self.gate.charge(self.hold, prompt + output)
