"""Stand-ins a real caller provides: the queue's wake-up callback and a stream's progress."""

from __future__ import annotations

from dataclasses import dataclass


class Counter:
    """A wake-up callback that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


@dataclass
class Progress:
    """A stream's progress as the proxy's StreamStats reports it."""

    first_at: float | None = None
    last_at: float | None = None
    events: int = 0
