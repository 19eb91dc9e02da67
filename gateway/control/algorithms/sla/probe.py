"""The `sla` controller's probes: a raise of the limit measured against the limit it came from, kept
only on a measured gain in rate; and the throughput climb made of them where no limit meets the SLA.

A probe from S to L is a throughput "step", a "jump" to K (the requests the KV cache holds), a
raise "within" target past what the cache holds, a step "down" within target where much of the
output missed a target (sla.controller), or a step down to the "batch" the engine ran in the
throughput climb. "within" and "down" compare goodput (the rate times the share of the output that
met every target, sla.ledger), the others the rate. Each tick while one is being
measured, in order (g = `min_gain`, z = `noise_z`, h = `hidden_share`):

    the engine ran no more requests at L than at S (sla.engine_batch), not down
                                                                                back to S  no_gain
    L's rate not yet on `probe_dwell` seconds measured since its requests turned over  hold  probing
    down, batch: S's goodput (rate for batch) over (1 + g) x L's by more than z x both counts'
          noise                                                                 back to S  no_gain
          otherwise                                                            keep       probe
    more than max(1, h x (L - S)) of the raise held outside the engine, the rate not higher
                                                                                back to S  no_gain
    L's rate over (1 + g) x S's by more than z x both counts' noise            keep       probe
    under it by that noise                                                      back to S  no_gain
    in between, with less than `probe_every` measured                           hold       probing
    in between after that: a step or jump is kept on its point estimate, a raise within target
    goes back                                                                   keep / back to S
Throughput climb (SLA infeasible), with B the limit that delivered most over `probe_dwell` lately:
    B is not L, and L was never measured or delivered clearly less than B
                     a probe up from B, judged against B as measured, when due  probe
                     else B (a higher L that delivered less first delays the next probe by
                     `probe_every`)                                             throughput_falls
    L measured for `probe_dwell` with W >= 1 requests on average waiting in the engine's queue
    (sla.ledger), the wait after a probe undone over (`to_batch`, within target too)
                     L <- L - floor(W), a step to the "batch"                   probe
    a probe due      L <- L + max(s, q L), or straight to K when K is above that and no limit as
                     high was measured lately (sla.steps.probe_up)              probe
    otherwise        hold                                                       steady
where s is twice the last step after one that gained at least half in proportion, else 0; a raise
within target takes s too (`slow_start`, sla.steps.growth). A jump sets no s.

Why each rule:
- Infeasible: latency is missed anyway, so throughput is all that is left to win, and the limit
  goes where it delivered most and keeps probing upward. A batching engine's rate rises with its
  batch until the KV cache is full, so the first probe goes there at once rather than in steps of
  q L, each of which costs a settle and a dwell (a minute from a cut limit on a real engine); a jump
  kept does not double the next step, which would overshoot by twice the cache. The cuts that
  proved the floor were no failed probes, so the first probe goes at once: up from the limit the
  floor was proven at, or to K judged against the limit with the most throughput as measured
  (measuring it again first held that limit 6 s of a 25-s window at 0.8 of K's rate on the real
  engine); only a higher limit that delivered less makes it wait, or it would lead back.
- Slow start: a step that gained half in proportion says the rate still rises with the batch, so
  the next step doubles, as TCP's slow start does, instead of paying a dwell per small step. A cut
  or a pause starts slow again: what the last step showed is of before them.
- Noise: a rate difference counts only beyond z standard deviations of the counts behind both
  rates (whole answers are a Poisson count, which the engine's own count avoids); a probe whose
  gain is within the noise is measured longer (up to `probe_every`), then undone if it was a raise
  within target (holding meets the SLA) and decided by its point estimate in the throughput climb;
  probes are judged only on what they delivered once their requests turned over.
- Outside the batch: a rate grows at most in proportion to the batch the engine runs, so a probe
  whose requests only wait in its queue (the KV cache or `max_num_seqs` full) gained nothing, which
  the engine's count shows in two ticks where the rate needs a turnover and a dwell. The gateway's
  in-flight count minus vLLM's running + waiting is the queue the engine cannot see (a busy front
  end): a raise that landed there without a higher rate only lengthens it
  (sla.verdicts.held_outside).
- Down: a step down that delivered as much goodput has fewer misses for it, so only a clear loss
  takes it back; the batch and the front end's queue only say whether a raise was taken up.
- Batch: requests waiting in the engine's queue add nothing to the batch it runs, so nearly nothing
  to its rate, and their wait to every TTFT; and that queue hides a front end's delay, which is how
  a floor of time outside the engine is known to have gone (sla.floor). So the climb
  comes down to what the engine ran, and goes back only if that delivered clearly less (a short
  queue can keep the batch full as requests finish: chat-short on the real engine gave 1,872
  tokens/s at a fixed 64 with 31 waiting, 1,776 at 32 with none); in virtual time the jump to K
  left 25 of 57 waiting, and 32 delivered 926 tokens/s against 57's 929.
- A probe undone doubles the wait before the next (sla.pacing); one kept resets it.
Pure: the caller passes each observation, with its time.
"""

from __future__ import annotations

import math
from typing import Literal

from gateway.control.algorithms.base import decide
from gateway.control.algorithms.sla.engine_batch import BatchSince
from gateway.control.algorithms.sla.ledger import Entry, Ledger
from gateway.control.algorithms.sla.pacing import ProbePacing
from gateway.control.algorithms.sla.params import SLAParams
from gateway.control.algorithms.sla.settling import Settling
from gateway.control.algorithms.sla.steps import probe_up
from gateway.control.algorithms.sla.verdicts import compare, gains, held_outside, hidden, probe_kept
from gateway.types import Decision, Observation


class Probes:
    def __init__(self, params: SLAParams, ledger: Ledger, settling: Settling, batch: BatchSince) -> None:
        self._p = params
        self._ledger, self._settling, self._batch = ledger, settling, batch
        self.pacing = ProbePacing(params.probe_every, params.max_probe_wait)
        self._from: int | None = None  # where the probe being measured started
        self._kind: Literal["step", "jump", "within", "down", "batch"] = "step"
        self._step = 0  # the next step after one that gained in proportion (slow start)

    @property
    def measuring(self) -> bool:
        """Whether a probe is being measured."""
        return self._from is not None

    @property
    def lowering(self) -> bool:
        """Whether a step down within target is being measured."""
        return self._from is not None and self._kind == "down"

    @property
    def slow_start(self) -> int:
        """The step after a probe that gained at least half in proportion to its own, else 0."""
        return self._step

    def drop(self) -> None:
        """Measure no probe any more, and start slow again: the limit stopped binding, or is over
        target."""
        self._from, self._step = None, 0

    def within(self, start: int) -> None:
        """The raise from `start` about to be made within target is kept only on a measured gain."""
        self._from, self._kind = start, "within"

    def lower(self, start: int) -> None:
        """The step down from `start` about to be made within target goes back only if it delivered
        clearly less goodput."""
        self._from, self._kind = start, "down"

    def climb(self, obs: Observation) -> Decision:
        """Latency cannot be met: probe upward and keep a step only if the rate rose clearly."""
        now, limit = obs.now, obs.limit
        if self._from is not None:
            return self.judge(obs)
        here = self._ledger.get(limit)
        best = self._ledger.best(now, self._p.probe_dwell, good=False)
        unknown = here is None or here.measured < self._p.probe_dwell  # never measured here
        if (
            best
            and best.limit != limit
            and (unknown or (self.measured(obs, here) and self.gains(best, here, good=False)))
        ):
            if not unknown and limit > best.limit:
                self.pacing.wait_from(now)
            elif self.pacing.due(now) and (up := self._up(obs, best.limit))[1]:
                return self._start(obs, best.limit, *up)  # judged against the best as measured
            return decide(obs, best.limit, "throughput_falls", "to the limit with the most throughput")
        if (to_batch := self.to_batch(obs, here)) is not None:
            return to_batch
        if self.may_probe(obs):
            return self._start(obs, limit, *self._up(obs, limit))
        return decide(obs, limit, "steady", "holding the limit with the most throughput")

    def to_batch(self, obs: Observation, here: Entry | None) -> Decision | None:
        """Down to the batch the engine ran where L, measured, left requests in its queue."""
        limit = obs.limit
        queued = None if here is None or here.waiting is None else math.floor(here.waiting)
        if queued and self.measured(obs, here) and self.may_lower(obs):
            self._from, self._kind = limit, "batch"
            why = f"the engine held {queued} of {limit} waiting: down to the batch it ran"
            return decide(obs, max(obs.floor, limit - queued), "probe", why)
        return None

    def judge(self, obs: Observation) -> Decision:
        """The probe being measured: keep it only if the rate rose beyond the noise."""
        assert self._from is not None
        now, limit = obs.now, obs.limit
        here, start = self._ledger.get(limit), self._ledger.get(self._from)
        down = self._kind in ("down", "batch")
        if start is not None and not down and (why := self._batch.no_gain(limit, start, self._p)) is not None:
            return self._undo(obs, why)
        if not self.measured(obs, here) or here is None:
            return decide(obs, limit, "probing", f"measuring {limit} against {self._from}")
        held = (
            None
            if down
            else held_outside(
                self._ledger.fresh(now), limit, self._p.hidden_share, self._p.min_gain, hidden(obs)
            )
        )
        keep: bool | None = held is None
        # Within target goodput is won, and a raise undone meets the SLA; in the throughput climb
        # latency is missed anyway.
        good = self._kind in ("within", "down")
        if keep and start is not None and down:
            keep = not self.gains(start, here, good=good)  # as much for less latency stays
        elif keep and start is not None:
            more_time = self._settling.in_force_for < self._settling.turnover(obs) + self._p.probe_every
            keep = probe_kept(here, start, self._p, more_time, on_point=self._kind != "within", good=good)
            if keep is None:
                return decide(obs, limit, "probing", f"measuring {compare(here, start, good=good)}")
        if keep:
            strong = start is None or here.delivery(good)[0] >= start.delivery(good)[0] * (
                1.0 + 0.5 * (limit - start.limit) / start.limit
            )
            self._step = 2 * (limit - self._from) if strong and self._kind in ("step", "within") else 0
            self._from = None
            if not down:
                self.pacing.held()  # a raise held; a step down says nothing of the next raise
            return decide(obs, limit, "probe", "" if start is None else compare(here, start, good=good))
        return self._undo(obs, held or compare(start, here, good=good) if start else "")

    def measured(self, obs: Observation, here: Entry | None) -> bool:
        """Whether the current limit's rate stands on `probe_dwell` seconds measured since its requests
        turned over."""
        return (
            here is not None
            and here.measured >= self._p.probe_dwell
            and self._settling.in_force_for >= self._settling.turnover(obs) + self._p.probe_dwell
        )

    def may_probe(self, obs: Observation, *, settled: bool = False) -> bool:
        """Settled (or `settled` by the caller's evidence), the wait after a failed probe over, and
        room below the ceiling. A throughput probe needs no P90: at a low limit with long answers
        20 first tokens take minutes."""
        settled = settled or self._settling.settled(obs)
        return settled and self.pacing.due(obs.now) and obs.limit < obs.ceiling

    def may_lower(self, obs: Observation) -> bool:
        """Settled, and the wait after a failed probe over."""
        return self._settling.settled(obs) and self.pacing.due(obs.now)

    def gains(self, a: Entry, b: Entry | None, *, good: bool) -> bool:
        """Whether `a` delivered clearly more than `b`, in goodput if `good`
        (sla.verdicts.gains)."""
        return b is not None and gains(a, b, self._p.min_gain, self._p.noise_z, good=good)

    def _up(self, obs: Observation, start: int) -> tuple[int, bool]:
        fresh = self._ledger.fresh(obs.now, self._p.probe_dwell)
        return probe_up(obs, start, self._step, fresh, self._p.rate_probe_gain)

    def _start(self, obs: Observation, start: int, to: int, jump: bool) -> Decision:
        self._from, self._kind, to = start, "jump" if jump else "step", min(obs.ceiling, to)
        return decide(obs, to, "probe", f"to {to}, what the KV cache holds" if jump else f"trying {to}")

    def _undo(self, obs: Observation, why: str) -> Decision:
        """Back to where the probe being measured started."""
        assert self._from is not None
        back, self._from, self._step = self._from, None, 0
        self.pacing.failed(obs.now)
        return decide(obs, back, "no_gain", why)
