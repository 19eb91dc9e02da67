"""When a limit's evidence is its own: how long it has been in force, and whether it has settled
(for its P90s) and turned over (for its rate).

Per tick, with T the seconds the limit has been in force (sla.in_force), s the
`settle` parameter, m the epoch's own median e2e and M the last median e2e measured on
`min_samples` values:

    settled      T >= S = max(s, m)
    turned over  T >= max(S, M) until the epoch's median e2e stands on `min_samples` values,
                 then T >= S

Why: a second cut before S would act on the evidence of the first again and cascade to the floor,
and a P90 read before it is of requests that ran at the old limit (a tick after a cut from 8 to 4
they ran in a batch of 8, and taken as 4's they prove a latency floor that is not there). A rate
needs the requests in flight at the change to have turned over, and right after a change m is of
no answer, or of the shortest, the first back: a raise past what the KV cache holds, judged on its
first seconds, was kept on a burst (on the real engine 25 read 649 tokens/s against 20's 579 in
the first 4-6 s of 6-9-s whole answers, and 582 once they had turned over). M stands in until m
stands on as many values.
Pure: the caller passes each observation, with its time.
"""

from __future__ import annotations

from gateway.control.algorithms.sla.in_force import InForce
from gateway.types import Observation


class Settling:
    def __init__(self, settle: float) -> None:
        self._settle = settle
        self._in_force = InForce()
        self.in_force_for = 0.0
        """Seconds the current limit has been in force, as of the last observation."""
        self._median_e2e = 0.0  # the median e2e last measured on `min_samples` values

    def observe(self, obs: Observation) -> None:
        """Take this tick's observation; call once per tick before the other methods."""
        self.in_force_for = self._in_force.seconds(obs)
        if self._own_median(obs):
            self._median_e2e = obs.p50["e2e"]

    @property
    def new_epoch(self) -> bool:
        """Whether the last observation began an epoch (sla.in_force)."""
        return self._in_force.new_epoch

    def settle(self, obs: Observation) -> float:
        """S: seconds in force after which the limit's P90s are its own."""
        return max(self._settle, obs.p50.get("e2e", 0.0))

    def turnover(self, obs: Observation) -> float:
        """Seconds in force after which the limit's rate is its own."""
        return self.settle(obs) if self._own_median(obs) else max(self.settle(obs), self._median_e2e)

    def settled(self, obs: Observation) -> bool:
        return self.in_force_for >= self.settle(obs)

    def turned_over(self, obs: Observation) -> bool:
        return self.in_force_for >= self.turnover(obs)

    @staticmethod
    def _own_median(obs: Observation) -> bool:
        return obs.counts.get("e2e", 0) >= obs.min_samples
