"""The batch a raise bought: how many requests the engine ran, on average, since the current limit
came in force, and whether that rules out a gain before the rate can tell.

Per tick with a fresh scrape that counts only the gateway's requests (running + waiting <= the peak
in flight), from the second tick the limit is in force on:

    B = sum(running x interval) / sum(interval),   O = the same mean of the requests the engine
                                                   counted neither running nor waiting
    a raise from L0 (batch B0, O0 as the ledger measured them) to L1 gained nothing when, over at
    least `settle` seconds,   B <= (1 + g) x B0   and   O <= O0 + max(1, h x (L1 - L0))
    (g = `min_gain`, h = `hidden_share`)

Why: a batching engine's rate is its batch over its step time, and the step time does not fall as
the batch grows, so a rate grows at most in proportion to the batch. A raise whose requests the
engine did not run (they wait in its queue because the KV cache or `max_num_seqs` is full) cannot
gain by g, and that shows within seconds, where the rate must wait for the requests to turn over
(on the real engine a median e2e of 6-9 s plus the dwell: 12 s at a loss in a 25-s window).
It reads one way only: the first seconds of a raise past what the KV cache holds run more (the
new requests' contexts are short) until preemption takes them back out, so a batch that grew says
nothing yet, and the rate decides.
The second tick: the requests dispatched at the raise reach the engine's count within one.
The O condition: requests still on their way through a busy front end have not yet asked to run,
and a front end that holds the raise's requests is what `held_outside` judges, on the rate.
Pure: the caller passes each observation, the seconds the limit has been in force and whether the
observation began an epoch.
"""

from __future__ import annotations

from gateway.control.algorithms.sla.ledger import Entry, TimeWeightedMean
from gateway.control.algorithms.sla.params import SLAParams
from gateway.control.algorithms.sla.verdicts import engine_batch
from gateway.types import Observation


class BatchSince:
    def __init__(self) -> None:
        self._batch = TimeWeightedMean()  # B
        self._outside = TimeWeightedMean()  # O
        self.running: float | None = None
        """The requests the engine ran as of this tick's reading, if it could be read."""

    @property
    def seconds(self) -> float:
        """Seconds of readings behind the means."""
        return self._batch.seconds

    def observe(self, obs: Observation, in_force_for: float, new_epoch: bool) -> None:
        """Take this tick's observation, the seconds its limit has been in force and whether it
        began an epoch (sla.in_force); call once per tick."""
        if new_epoch:
            self._batch, self._outside = TimeWeightedMean(), TimeWeightedMean()
        counted = engine_batch(obs)
        self.running = None if counted is None else counted[0]
        if counted is None or in_force_for <= obs.interval or obs.interval <= 0:
            return
        running, outside = counted
        self._batch.add(1.0, running, obs.interval)
        self._outside.add(1.0, outside, obs.interval)

    def no_gain(self, limit: int, start: Entry, p: SLAParams) -> str | None:
        """Why a raise from `start` to `limit` cannot have gained, or None if it may have (or it is
        too early to tell)."""
        running, outside = self._batch.mean, self._outside.mean
        if self.seconds < p.settle or running is None or outside is None:
            return None
        if start.running is None or start.hidden is None:
            return None
        if outside > start.hidden + max(1.0, p.hidden_share * (limit - start.limit)):
            return None
        if running > (1.0 + p.min_gain) * start.running:
            return None
        return (
            f"the engine ran {running:.1f} requests at {limit}, {start.running:.1f} at {start.limit}: "
            "a rate grows no faster than the batch"
        )
