"""The proof that latency has a floor the concurrency limit does not control.

Two proofs, either enough:
- Outside the engine: the proxy's TTFT P90 minus the engine's own TTFT P90 (from its histogram,
  scraped within two ticks) is at or over the TTFT target, and no reading in between said less
  for `dwell` seconds: the proxy's P90 covers the requests since the last change, the engine's one
  scrape interval, so one reading can differ by chance. That time is spent before the engine
  sees the request (a busy front end, the network). It is a floor only where a cut did not remove
  it: at the configured floor limit, or at a settled limit with the same delay measured lately at
  one at least `span` times higher (the controller keeps those limits). A front end that queues
  what the gateway lets in (tokenizing on a busy CPU) delays requests more the more it is let
  in; taken as a floor where it first shows, it would hold the limit above one that meets the
  target.
- Along the limit, signal by signal: the lowest measured limit L0 misses a signal's target (r0 > 1,
  that signal's P90 over its target), and either L0 is the configured floor, or limits L1 >= span x
  L0 read that signal too and for every one of them the line through (L0, r0) and (L1, r1) is still
  over 1 at the floor: r0 - (r1 - r0) / (L1 - L0) x (L0 - floor) > 1, and so is the power law
  through them, r0 x (floor / L0)^a with a = ln(r1 / r0) / ln(L1 / L0); and so are the line and the
  power law through every limit in between that read it. The lesser of the two curves, because below
  L0 nothing was measured: the line overstates latency there where it rises steepest at the lowest
  limits (a < 1), the power law where it rises steepest at the highest (a > 1, a queue building). On
  the real engine TPOT with long prompts read 0.45x its target at 1, 1.07x at 3, 1.69x at 4 and
  2.26x at 8 (each request beside another adds its prefill to that one's decode): the line through 4
  and 8, 1.26x at 1, proved a floor and sent the limit to what the KV cache holds, TPOT 2.5x its
  target for the rest of the run, where the power law reads 0.94x. Every limit, because an entry may
  predate a change of capacity: a limit measured before the backend slowed down looks as slow as a
  lower one measured after, and that pair alone would hold the limit where latency is missed. A
  higher limit that met its target refutes the floor outright: the SLA was met there, so the
  readings straddle a change of the backend (in virtual time capacity halved as 12 was probed from
  11, which read 0.87x; 6 then read 1.18x, and with the limits above it measured before, proved a
  floor that sent the limit to what the KV cache holds, TPOT 3x its target for a minute). One closer
  than the span counts against a floor, not for it: a line that falls under 1 from a few steps up is
  a rise beyond the noise the span guards against (capacity halved: 6 at 1.06x, 11 at 1.63x, and 12
  at 1.08x read on the tick of the slowdown).
  Each ratio stands on min_samples values or on values significantly over target
  (gateway.control.algorithms.base.quantile_exceeds), and the two limits are at least `span` apart: two
  limits a step apart differ in latency by less than its noise, and a false verdict holds the
  limit where latency is missed. L0 has been measured for `dwell` seconds since it settled: a
  slowdown that passes (the engine busy for a few seconds, the first seconds of a cold start)
  shows at a limit and at the one a cut leads to alike, and a floor proven on it would hold the
  limit at the KV cache's size for `floor_memory`; the caller holds L0 while the proof waits.
The floor reported is each signal proven so, at the lowest P90 of that signal measured over target
at any limit (or the part spent outside the engine). Per signal, because the limits' worst ratios
mix them: on the real engine a front end's stall put TTFT at 59x its target at 4 while TPOT read
4x there and 3.3x at 2, and the line through the worst ratios (59x at 4, TPOT's 3.3x at 2) fell
steeply, as latency that a cut lowers does; the TPOT floor waited until the floor limit had been
measured, 24 s into the load at 1 and 2 in flight. Taken under one name, a TPOT P90 was read as a
TTFT floor of 0.008 s against a target of 0.03; and a signal missed only at the higher limits is
latency the limit adds, not a floor (in virtual time a TPOT P90 read at 32, with a TTFT floor
proven at 4, made that floor the engine's own and kept it past its cause).
ProvenFloor tries both and remembers a floor for `floor_memory` seconds after it was last proven,
unless it was time spent outside the engine that has gone since. A floor is outside the engine when
the front end's delay proved it, or when it is a TTFT floor proven along the limit and, at its
lowest limit, requests spent at least the target outside the engine: by Little's law their mean
seconds there are the mean requests held outside over the requests finished per second
(`Entry.outside_seconds`), and the P90 is taken as ln 10 times the mean, that of an exponential
delay. Such a floor is outlived once the limit in force, measured for the dwell with on average
under one request waiting in the engine's queue, shows that P90 under the target. Why: on the real
engine the front end stalled a fresh gateway's first requests for 7 s (8 and then 4 in flight, none
running), which proved a floor at both limits; the limit went to what the KV cache holds and kept
the floor for the 120-s memory at a TTFT P90 of 2.4-2.8 s against 0.37, while the front end held
0-2 requests of 46-64 there. Not where the engine queues: a request held outside would have waited
in the queue as long, so the queue hides the front end's delay. On the real engine a front end that
stalls again and again (chat-short: no limit from 1 to 64 met a TTFT P90 of 0.22 s) read 0.07-0.12 s
outside per request as a P90 at a fixed 64 with 31 waiting, against 0.10-0.50 s (median 0.23) at 2
to 32 with none: the floor proven at 3 was forgotten at 56, and the limit cut to 9 within 20 s
before proving it again. And only on what the limit in force read after the floor was first
proven, for the dwell: the limit the climb goes to was measured before, often before the cause came
(on the real engine a stall's floor proven at 3 was forgotten the tick the climb reached 8, whose
entry was of a clean spell 28 s earlier, and the limit was cut to 4 and then 2, `sla_infeasible`
reported for 4 s of 40). Little's law and not the proxy's TTFT P90 minus the engine's: at such a
limit the engine's P90 falls in its 1.0-2.5-s histogram bucket, off by up to a second, while the
count of requests outside is exact. Floors of the engine's own latency (a prefill slower than the
target, a TPOT floor) are not outside it and last their memory.
No I/O and no clock: the caller passes the observation (with its time) and the ledger's entries;
FrontEndDelay and ProvenFloor keep what they have seen between ticks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gateway.control.algorithms.sla.ledger import Entry
from gateway.control.algorithms.sla.params import SLAParams
from gateway.types import Observation, Signal

EXPONENTIAL_P90 = math.log(10.0)
"""The P90 of an exponentially distributed delay over its mean."""


def outside_engine(obs: Observation) -> float | None:
    """The TTFT P90 spent outside the engine, if the engine's own P90 is fresh; else None."""
    stats = obs.engine_stats
    if (
        stats is None
        or stats.ttft_p90 is None
        or "ttft" not in obs.p90
        or not stats.fresh(obs.now, obs.interval)
    ):
        return None
    return obs.p90["ttft"] - stats.ttft_p90


class FrontEndDelay:
    """The first proof, read tick by tick: since when the front end's delay has been at or over the
    target, and at which settled limits lately (within `memory`)."""

    def __init__(self, *, dwell: float, span: float, memory: float) -> None:
        self._dwell, self._span, self._memory = dwell, span, memory
        self.since: float | None = None
        self._at: dict[int, float] = {}

    def floor(self, obs: Observation, target: float, settled: bool) -> float | None:
        """The delay, if this tick proves it a floor: over target for `dwell` seconds, and at the
        floor limit or lately at a limit at least `span` times this one (a cut did not remove it)."""
        spent = outside_engine(obs)
        if spent is None:
            return None
        if spent < target:
            self.since = None  # a reading that says the engine accounts for it
        elif self.since is None:
            self.since = obs.now
        if self.since is None or not settled:
            return None
        self._at = {n: t for n, t in self._at.items() if obs.now - t <= self._memory}
        self._at[obs.limit] = obs.now
        if obs.now - self.since < self._dwell:
            return None
        return spent if self.provable(obs) else None

    def in_doubt(self, obs: Observation) -> bool:
        """Whether the delay is over target where it can prove a floor, for less than twice the dwell:
        the caller holds while it shows whether it lasts."""
        return self.since is not None and obs.now - self.since < 2 * self._dwell and self.provable(obs)

    def provable(self, obs: Observation) -> bool:
        """Whether the delay can prove a floor at this limit: it is the floor limit, or the delay
        was measured lately at one at least `span` times higher."""
        return obs.limit <= obs.floor or any(
            n >= self._span * obs.limit and obs.now - t <= self._memory for n, t in self._at.items()
        )


def along_the_limit(
    entries: Sequence[Entry], floor: int, *, span: float, dwell: float = 0.0
) -> dict[Signal, float] | None:
    """The floor of each signal proven by the ledger's entries (sorted by limit), else None; with the
    lowest limit measured for at least `dwell` seconds."""
    points = [e for e in entries if e.readings]
    if not points or points[0].measured < dwell:
        return None
    low, found = points[0], {}
    for signal, (r0, _) in low.readings.items():
        line = [(e.limit, e.readings[signal].ratio) for e in points[1:] if signal in e.readings]
        if r0 > 1.0 and _along(low.limit, r0, line, floor, span):
            over = [e.readings[signal] for e in points if signal in e.readings]
            found[signal] = min(p90 for r, p90 in over if r > 1.0)
    return found or None


def _along(limit: int, ratio: float, higher: Sequence[tuple[int, float]], floor: int, span: float) -> bool:
    """Whether the ratio read at `limit` is a floor by the ratios read at the `higher` limits."""
    proven = limit <= floor  # the floor limit needs no line
    for at, r in [] if proven else higher:
        if r <= 1.0:
            return False  # a higher limit met the target: read before a change of the backend
        line = ratio - (r - ratio) / (at - limit) * (limit - floor)
        power = ratio * (floor / limit) ** (math.log(r / ratio) / math.log(at / limit))
        if min(line, power) <= 1.0:
            return False  # latency rises with the limit: a cut lowers it
        proven = proven or at >= span * limit
    return proven


def spent_outside(e: Entry, target: float) -> bool:
    """Whether the P90 of the seconds requests spent outside the engine at `e`'s limit, taken as
    `EXPONENTIAL_P90` x their mean (Little's law, `Entry.outside_seconds`), reaches `target`; False
    where not measured."""
    seconds = e.outside_seconds
    return seconds is not None and EXPONENTIAL_P90 * seconds >= target


class ProvenFloor:
    """The latency floor proven this tick by either proof, else the one proven within `floor_memory`,
    unless it is time spent outside the engine that has gone since (`outlived`)."""

    def __init__(self, p: SLAParams) -> None:
        self.front_end = FrontEndDelay(dwell=p.probe_dwell, span=p.floor_span, memory=p.memory)
        self._p = p
        self._found: tuple[dict[Signal, float], float] | None = None  # the floor, and until when
        self._since = 0.0  # when the floor remembered was first proven
        self._outside = False  # whether it is time spent outside the engine

    def find(
        self, obs: Observation, signal: Signal, ttft: float | None, settled: bool, entries: Sequence[Entry]
    ) -> dict[Signal, float] | None:
        """The floor proven this tick, whose over-target signal is `signal`, or remembered; `ttft` is
        the TTFT target (None without one) and `entries` the ledger's, by limit."""
        spent = None if ttft is None or signal != "ttft" else self.front_end.floor(obs, ttft, settled)
        found: dict[Signal, float] | None = None if spent is None else {"ttft": spent}
        outside = found is not None
        if found is None:
            found = along_the_limit(entries, obs.floor, span=self._p.floor_span, dwell=self._p.floor_dwell)
            outside = (
                found is not None
                and ttft is not None
                and set(found) == {"ttft"}
                and spent_outside(next(e for e in entries if e.readings), ttft)
            )
        if found is None:
            return self.remembered(obs.now)
        if self.remembered(obs.now) is None:
            self._since = obs.now
        self._found, self._outside = (found, obs.now + self._p.floor_memory), outside
        return found

    def remembered(self, now: float) -> dict[Signal, float] | None:
        return self._found[0] if self._found is not None and now < self._found[1] else None

    def outlived(self, now: float, here: Entry | None, target: float | None, in_force: float) -> bool:
        """Whether the floor remembered is time spent outside the engine and `here` (the entry of the
        limit in force for `in_force` seconds) shows it gone: under the TTFT `target` (`spent_outside`),
        measured for the dwell since the floor was first proven."""
        if not self._outside or self.remembered(now) is None or here is None or target is None:
            return False
        if here.waiting is None or here.waiting >= 1.0:
            return False  # requests waiting in the engine would have waited outside it as long
        if min(in_force, now - self._since) < self._p.probe_dwell:
            return False  # what `here` holds was measured before the floor: its cause had not come
        return here.measured >= self._p.probe_dwell and not spent_outside(here, target)

    def forget(self) -> None:
        """A target met, or the time outside the engine gone: no floor is remembered any more."""
        self._found, self._outside = None, False
