"""The engine model: vLLM v1's continuous-batching scheduler over a paged KV cache. Pure.

One step (vLLM v1 `Scheduler.schedule`, FCFS policy):
1. Token budget B = max_num_batched_tokens. Every running sequence, oldest first, asks for
   num_tokens - num_computed tokens (1 when decoding, the rest of its prompt while prefilling),
   cut to what is left of B (chunked prefill). Its blocks must cover num_computed + new tokens;
   when the pool cannot supply them, the newest running sequence is preempted (blocks freed, its
   computed tokens forgotten, put back at the front of the waiting queue) until they fit or the
   sequence preempted itself.
2. Only when nothing was preempted, waiting sequences join in order while running < max_num_seqs
   and budget is left. A joining sequence first reuses cached full blocks of its prefix (at least
   its last token is recomputed), then needs blocks for its new tokens; the first one that does not
   fit stops admission.
   Prefix-cache counters (vLLM's `vllm:prefix_cache_queries` / `_hits`, in tokens) count at that
   admission, as vLLM 0.32 records them: queries the sequence's tokens, hits the cached tokens
   reused; a preempted sequence coming back is not counted again (vLLM keeps those apart), nor is
   anything when prefix caching is off.
3. The step takes `step_time(new tokens, context tokens)`. Afterwards every sequence whose computed
   tokens reached its length samples one token; one that reached its output target finishes and
   frees its blocks at once.

Output target: `max_tokens` cut to max_model_len - prompt_len (vLLM default when absent: all of
it); with `ignore_eos` exactly that, otherwise a log-normal draw (the profile's `output_mu` and
`output_sigma`) capped by it.

Time never comes from a clock here: callers pass `now`, and randomness is an injected
`random.Random`. Sources: vLLM `vllm/v1/core/sched/scheduler.py`, `vllm/v1/core/kv_cache_manager.py`.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from enum import Enum

from gateway.sim.kvcache import BlockPool
from gateway.sim.profiles import Profile
from gateway.sim.steptime import step_time


class SeqState(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(eq=False, slots=True)
class Sequence:
    uid: int
    prompt_len: int
    max_output: int
    finish_reason: str
    """Reason reported when the output target is reached: 'length' (cap) or 'stop' (EOS)."""
    arrival: float
    hashes: list[int]
    """Prefix hashes of full blocks: those of the prompt, extended as output blocks fill."""
    num_output: int = 0
    num_computed: int = 0
    blocks: list[int] = field(default_factory=list)
    num_cached_blocks: int = 0
    state: SeqState = SeqState.WAITING
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    preemptions: int = 0
    prefix_hit_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output

    @property
    def done(self) -> bool:
        return self.state in (SeqState.FINISHED, SeqState.ABORTED)


@dataclass(slots=True)
class StepPlan:
    started_at: float
    scheduled: list[tuple[Sequence, int]]
    num_tokens: int
    kv_tokens: int
    duration: float
    preempted: int

    @property
    def empty(self) -> bool:
        return not self.scheduled


@dataclass(slots=True)
class StepReport:
    now: float
    emitted: list[Sequence] = field(default_factory=list)
    """Sequences that produced one token this step (finished ones included)."""
    finished: list[Sequence] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    itls: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preempted: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    iteration_tokens: int = 0


def output_target(
    profile: Profile,
    rng: random.Random,
    prompt_len: int,
    max_tokens: int | None,
    ignore_eos: bool,
) -> tuple[int, str]:
    """How many tokens the sequence will produce and the finish reason it will report."""
    room = profile.max_model_len - prompt_len
    cap = room if max_tokens is None else min(max_tokens, room)
    if cap < 1:
        raise ValueError(f"no room for output: prompt {prompt_len}, max_model_len")
    if ignore_eos:
        return cap, "length"
    drawn = max(1, int(rng.lognormvariate(profile.output_mu, profile.output_sigma)))
    return (cap, "length") if drawn >= cap else (drawn, "stop")


class Engine:
    def __init__(self, profile: Profile, rng: random.Random) -> None:
        self.profile = profile
        self.rng = rng
        self.pool = BlockPool(profile.num_gpu_blocks, caching=profile.enable_prefix_caching)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions_total = 0
        self._next_uid = 0
        self._pending = StepReport(now=0.0)
        """Counts from admission (prefix cache) folded into the next report."""

    # --- state -----------------------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def kv_usage(self) -> float:
        return self.pool.usage

    # --- requests --------------------------------------------------------------------------

    def add(
        self,
        prompt_len: int,
        prompt_hashes: list[int],
        now: float,
        *,
        max_tokens: int | None = None,
        ignore_eos: bool = False,
    ) -> Sequence:
        if prompt_len < 1:
            raise ValueError("prompt must have at least one token")
        if prompt_len >= self.profile.max_model_len:
            raise ValueError(f"prompt of {prompt_len} tokens does not fit max_model_len")
        target, reason = output_target(self.profile, self.rng, prompt_len, max_tokens, ignore_eos)
        full = prompt_len // self.profile.block_size
        seq = Sequence(
            uid=self._next_uid,
            prompt_len=prompt_len,
            max_output=target,
            finish_reason=reason,
            arrival=now,
            hashes=list(prompt_hashes[:full]),
        )
        self._next_uid += 1
        self.waiting.append(seq)
        return seq

    def abort(self, seq: Sequence) -> bool:
        """Remove a sequence wherever it is and free its blocks now. False if already done."""
        if seq.done:
            return False
        if seq.state is SeqState.RUNNING:
            self.running.remove(seq)
            self._release(seq)
        else:
            self.waiting.remove(seq)
        seq.state = SeqState.ABORTED
        return True

    # --- one step --------------------------------------------------------------------------

    def schedule(self, now: float) -> StepPlan:
        block = self.profile.block_size
        budget = self.profile.max_num_batched_tokens
        scheduled: list[tuple[Sequence, int]] = []
        preempted = 0
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            new = min(seq.num_tokens - seq.num_computed, budget)
            while not self._grow(seq, seq.num_computed + new):
                victim = self.running.pop()
                self._preempt(victim)
                preempted += 1
                if victim is seq:
                    break
            if seq.state is not SeqState.RUNNING:
                break
            self._cache_full(seq, seq.num_computed + new)
            scheduled.append((seq, new))
            budget -= new
            i += 1

        if not preempted:
            while self.waiting and len(self.running) < self.profile.max_num_seqs and budget > 0:
                seq = self.waiting[0]
                hits = self._prefix_hits(seq)
                start = len(hits) * block
                new = min(seq.num_tokens - start, budget)
                need = -(-(start + new) // block) - len(hits)
                evictable = sum(1 for b in hits if self.pool.is_free(b))
                if need > self.pool.num_free - evictable:
                    break
                self.waiting.popleft()
                for b in hits:
                    self.pool.touch(b)
                seq.blocks = hits + self.pool.allocate(need)
                seq.num_cached_blocks = len(hits)
                seq.num_computed = start
                seq.prefix_hit_tokens += start
                if self.pool.caching and not seq.preemptions:
                    self._pending.prefix_queries += seq.num_tokens
                    self._pending.prefix_hits += start
                seq.state = SeqState.RUNNING
                if seq.scheduled_at is None:
                    seq.scheduled_at = now
                self.running.append(seq)
                self._cache_full(seq, start + new)
                scheduled.append((seq, new))
                budget -= new

        num_tokens = sum(n for _, n in scheduled)
        kv_tokens = sum(s.num_computed + n for s, n in scheduled)
        return StepPlan(
            started_at=now,
            scheduled=scheduled,
            num_tokens=num_tokens,
            kv_tokens=kv_tokens,
            duration=step_time(self.profile, num_tokens, kv_tokens, len(scheduled)),
            preempted=preempted,
        )

    def complete(self, plan: StepPlan, now: float) -> StepReport:
        report = self._pending
        report.now = now
        report.preempted = plan.preempted
        report.iteration_tokens = plan.num_tokens
        self._pending = StepReport(now=now)
        for seq, new in plan.scheduled:
            if seq.state is not SeqState.RUNNING:
                continue  # aborted while the step ran
            seq.num_computed += new
            if seq.num_computed < seq.num_tokens:
                continue  # a prefill chunk: no token yet
            seq.num_output += 1
            report.generation_tokens += 1
            report.emitted.append(seq)
            if seq.first_token_at is None:
                seq.first_token_at = now
                report.ttfts.append(now - seq.arrival)
                report.prompt_tokens += seq.prompt_len
            elif seq.last_token_at is not None:
                report.itls.append(now - seq.last_token_at)
            seq.last_token_at = now
            if seq.num_output >= seq.max_output:
                seq.state = SeqState.FINISHED
                seq.finished_at = now
                self.running.remove(seq)
                self._release(seq)
                report.finished.append(seq)
        return report

    # --- internals -------------------------------------------------------------------------

    def _grow(self, seq: Sequence, tokens: int) -> bool:
        need = -(-tokens // self.profile.block_size) - len(seq.blocks)
        if need <= 0:
            return True
        if need > self.pool.num_free:
            return False
        seq.blocks.extend(self.pool.allocate(need))
        return True

    def _cache_full(self, seq: Sequence, tokens: int) -> None:
        """Register blocks that will be full after this step, as vLLM does when it allocates."""
        full = tokens // self.profile.block_size
        while seq.num_cached_blocks < full:
            j = seq.num_cached_blocks
            if j >= len(seq.hashes):
                # Output tokens are unique to their sequence: key them by its id.
                seq.hashes.append(hash((seq.hashes[j - 1] if j else 0, -1 - seq.uid, j)))
            self.pool.cache(seq.blocks[j], seq.hashes[j])
            seq.num_cached_blocks += 1

    def _preempt(self, seq: Sequence) -> None:
        self._release(seq)
        seq.num_computed = 0
        seq.state = SeqState.WAITING
        seq.preemptions += 1
        self.preemptions_total += 1
        self.waiting.appendleft(seq)

    def _release(self, seq: Sequence) -> None:
        self.pool.free(seq.blocks)
        seq.blocks = []
        seq.num_cached_blocks = 0

    def _prefix_hits(self, seq: Sequence) -> list[int]:
        usable = min(len(seq.hashes), (seq.num_tokens - 1) // self.profile.block_size)
        hits: list[int] = []
        for j in range(usable):
            b = self.pool.lookup(seq.hashes[j])
            if b is None:
                break
            hits.append(b)
        return hits
