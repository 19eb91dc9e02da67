"""A clock the test moves by hand, for the modules that take an injected clock (`clock=`)."""

from __future__ import annotations


class FakeClock:
    """Returns `now` when called; tests set `now` or `advance` it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
