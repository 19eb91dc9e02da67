"""The engine model's arithmetic: batching, KV blocks, preemption, chunked prefill, limits."""

from __future__ import annotations

import random

import pytest

from gateway.sim.closedloop import run_closed_loop
from gateway.sim.engine import Engine, SeqState, Sequence, StepReport
from gateway.sim.profiles import Profile, get_profile
from gateway.sim.steptime import step_time


def make(**overrides: object) -> Engine:
    base: dict[str, object] = {
        "block_size": 16,
        "num_gpu_blocks": 64,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 512,
        "max_model_len": 1024,
    }
    base.update(overrides)
    return Engine(get_profile("tiny-cpu", **base), random.Random(1))


def unique(n: int, tag: int, block: int = 16) -> list[int]:
    return [hash((tag, j)) for j in range(n // block)]


def step(engine: Engine, now: float) -> tuple[float, StepReport]:
    plan = engine.schedule(now)
    assert not plan.empty
    end = now + plan.duration
    return end, engine.complete(plan, end)


def run_until_done(engine: Engine, now: float = 0.0, limit: int = 10_000) -> float:
    for _ in range(limit):
        if not engine.has_work:
            return now
        now, _ = step(engine, now)
    raise AssertionError("engine did not drain")


def test_waiting_requests_join_one_batch_and_decode_one_token_each_per_step() -> None:
    engine = make()
    seqs = [engine.add(20, unique(20, i), 0.0, max_tokens=5, ignore_eos=True) for i in range(3)]
    plan = engine.schedule(0.0)
    assert [n for _, n in plan.scheduled] == [20, 20, 20]
    report = engine.complete(plan, plan.duration)
    assert report.generation_tokens == 3 and len(report.ttfts) == 3
    plan = engine.schedule(plan.duration)
    assert [n for _, n in plan.scheduled] == [1, 1, 1]
    run_until_done(engine, plan.duration)
    assert [s.num_output for s in seqs] == [5, 5, 5]
    assert all(s.state is SeqState.FINISHED and not s.blocks for s in seqs)
    assert engine.pool.num_free == 64


def test_step_time_grows_with_tokens_context_and_sequences() -> None:
    profile = get_profile("llama3-8b-h100")
    assert step_time(profile, 0, 0) == 0.0
    decode_1 = step_time(profile, 1, 500)
    decode_64 = step_time(profile, 64, 64 * 500)
    prefill = step_time(profile, 4096, 4096)
    assert decode_1 < decode_64 < prefill
    # The memory-bound floor: one more decode sequence costs far less than the first.
    assert step_time(profile, 2, 1000) - decode_1 < 0.1 * decode_1


def test_max_num_seqs_bounds_the_running_batch() -> None:
    engine = make(max_num_seqs=2)
    for _ in range(5):
        engine.add(10, [], 0.0, max_tokens=3, ignore_eos=True)
    step(engine, 0.0)
    assert (engine.num_running, engine.num_waiting) == (2, 3)


def test_sequence_takes_a_new_block_as_it_grows() -> None:
    engine = make()
    seq = engine.add(16, unique(16, 0), 0.0, max_tokens=40, ignore_eos=True)
    now, _ = step(engine, 0.0)  # prefill: 16 tokens in 1 block, first token sampled
    assert len(seq.blocks) == 1
    now, _ = step(engine, now)  # computes token 17: needs a second block
    assert len(seq.blocks) == 2 and seq.num_computed == 17
    while seq.num_computed < 32:
        now, _ = step(engine, now)
    assert len(seq.blocks) == 2
    now, _ = step(engine, now)
    assert len(seq.blocks) == 3


def test_newest_running_sequence_is_preempted_to_the_front_and_recomputes() -> None:
    # 4 blocks of 16; two sequences of 24 prompt tokens take 2 blocks each and then grow.
    engine = make(num_gpu_blocks=4, enable_prefix_caching=False)
    old = engine.add(24, [], 0.0, max_tokens=30, ignore_eos=True)
    new = engine.add(24, [], 0.0, max_tokens=30, ignore_eos=True)
    late = engine.add(5, [], 0.0, max_tokens=30, ignore_eos=True)
    now, _ = step(engine, 0.0)
    assert engine.running == [old, new] and engine.pool.num_free == 0
    while old.num_computed < 32:
        now, report = step(engine, now)
    # old needs a third block: new (the newest) is preempted and queued before `late`.
    now, report = step(engine, now)
    assert report.preempted == 1 and engine.preemptions_total == 1
    assert new.state is SeqState.WAITING and new.num_computed == 0 and not new.blocks
    assert list(engine.waiting) == [new, late]
    assert new.preemptions == 1
    produced = new.num_output
    run_until_done(engine, now)
    assert new.num_output == 30 and produced < 30
    assert engine.pool.num_free == 4


def test_sequence_that_must_grow_with_nothing_left_preempts_itself() -> None:
    engine = make(num_gpu_blocks=2, enable_prefix_caching=False)
    seq = engine.add(32, [], 0.0, max_tokens=5, ignore_eos=True)
    now, _ = step(engine, 0.0)
    plan = engine.schedule(now)  # token 33 needs a third block that does not exist
    assert plan.empty and plan.preempted == 1
    assert seq.state is SeqState.WAITING and engine.pool.num_free == 2


def test_chunked_prefill_spreads_a_long_prompt_over_the_token_budget() -> None:
    engine = make(max_num_batched_tokens=128)
    seq = engine.add(300, unique(300, 0), 0.0, max_tokens=2, ignore_eos=True)
    chunks = []
    now = 0.0
    while seq.first_token_at is None:
        plan = engine.schedule(now)
        chunks.append(plan.num_tokens)
        now += plan.duration
        engine.complete(plan, now)
    assert chunks == [128, 128, 44]


def test_decodes_share_the_budget_with_a_prefill_chunk() -> None:
    engine = make(max_num_batched_tokens=64)
    a = engine.add(10, [], 0.0, max_tokens=50, ignore_eos=True)
    now, _ = step(engine, 0.0)
    engine.add(200, [], now, max_tokens=5, ignore_eos=True)
    plan = engine.schedule(now)
    assert plan.scheduled[0] == (a, 1)
    assert plan.scheduled[1][1] == 63


def test_max_tokens_is_cut_to_what_max_model_len_leaves() -> None:
    engine = make(max_model_len=1024, num_gpu_blocks=128)
    seq = engine.add(660, unique(660, 0), 0.0, max_tokens=600, ignore_eos=True)
    run_until_done(engine)
    assert seq.num_output == 364 and seq.finish_reason == "length"


def test_prompt_that_fills_max_model_len_is_refused() -> None:
    engine = make(max_model_len=100)
    with pytest.raises(ValueError):
        engine.add(100, [], 0.0, max_tokens=1)


def test_output_length_is_log_normal_seeded_and_capped() -> None:
    def lengths(seed: int) -> list[int]:
        engine = Engine(get_profile("instant"), random.Random(seed))
        return [engine.add(10, [], 0.0, max_tokens=200).max_output for _ in range(200)]

    first = lengths(7)
    assert first == lengths(7) and first != lengths(8)
    assert max(first) == 200 and min(first) >= 1
    ordered = sorted(first)
    # log-normal(4, 1): median e^4 = 55.
    assert 35 < ordered[100] < 80


def test_identical_prompts_share_prefix_blocks() -> None:
    engine = make(num_gpu_blocks=64)
    prompt = unique(64, 0)  # 4 full blocks
    a = engine.add(64, prompt, 0.0, max_tokens=10, ignore_eos=True)
    now, _ = step(engine, 0.0)
    b = engine.add(64, prompt, now, max_tokens=10, ignore_eos=True)
    now, _ = step(engine, now)
    # All but the last block is reused (the last token is always recomputed).
    assert a.blocks[:3] == b.blocks[:3]
    assert b.prefix_hit_tokens == 48
    # a holds 5 blocks (65 tokens); b adds one of its own for the recomputed last block.
    assert engine.pool.num_free == 64 - 5 - 1
    run_until_done(engine, now)
    # Freed blocks stay cached: a third request hits them.
    c = engine.add(64, prompt, 10.0, max_tokens=1, ignore_eos=True)
    step(engine, 10.0)
    assert c.prefix_hit_tokens == 48


def test_prefix_cache_counters_count_tokens_at_admission_once() -> None:
    """vLLM's semantics: queries are the admitted sequence's tokens, hits the cached tokens reused;
    a preempted sequence admitted again is not counted twice."""
    engine = make(num_gpu_blocks=64)
    prompt = unique(64, 0)
    engine.add(64, prompt, 0.0, max_tokens=10, ignore_eos=True)
    now, report = step(engine, 0.0)
    assert (report.prefix_queries, report.prefix_hits) == (64, 0)
    engine.add(64, prompt, now, max_tokens=10, ignore_eos=True)
    engine.add(40, unique(40, 1), now, max_tokens=10, ignore_eos=True)
    _, report = step(engine, now)
    assert (report.prefix_queries, report.prefix_hits) == (64 + 40, 48)

    tight = make(num_gpu_blocks=4)
    tight.add(24, unique(24, 2), 0.0, max_tokens=30, ignore_eos=True)
    victim = tight.add(24, unique(24, 3), 0.0, max_tokens=30, ignore_eos=True)
    queries = 0
    now = 0.0
    while tight.has_work:
        now, report = step(tight, now)
        queries += report.prefix_queries
    assert victim.preemptions >= 1 and queries == 48


def test_prefix_cache_counters_stay_zero_without_prefix_caching() -> None:
    engine = make(enable_prefix_caching=False)
    engine.add(64, unique(64, 0), 0.0, max_tokens=2, ignore_eos=True)
    _, report = step(engine, 0.0)
    assert (report.prefix_queries, report.prefix_hits) == (0, 0)


def test_abort_frees_blocks_at_once() -> None:
    engine = make()
    seq = engine.add(100, unique(100, 0), 0.0, max_tokens=50, ignore_eos=True)
    plan = engine.schedule(0.0)
    assert engine.pool.num_free == 64 - 7
    assert engine.abort(seq)
    assert engine.pool.num_free == 64 and seq.state is SeqState.ABORTED
    report = engine.complete(plan, plan.duration)  # the step in flight ignores it
    assert report.generation_tokens == 0
    assert not engine.abort(seq)


def test_preempted_sequence_keeps_its_first_token_time() -> None:
    engine = make(num_gpu_blocks=4, enable_prefix_caching=False)
    engine.add(24, [], 0.0, max_tokens=30, ignore_eos=True)
    victim = engine.add(24, [], 0.0, max_tokens=30, ignore_eos=True)
    run_until_done(engine)
    assert victim.preemptions >= 1
    assert victim.first_token_at is not None and victim.first_token_at < 0.1


def tiny(**kw: object) -> Profile:
    return get_profile("tiny-cpu", **kw)


def test_tiny_cpu_kv_knee_in_virtual_time() -> None:
    """The real engine's shape (TABLE_A of loadtests/bench_sim_calibration.py): no preemption at 8
    clients, preemptions and queueing past the KV knee."""
    light = run_closed_loop(tiny(), 8, prompt_len=232, max_tokens=300, duration=6.0)
    heavy = run_closed_loop(tiny(), 32, prompt_len=232, max_tokens=300, duration=6.0)
    assert light.preemptions == 0 and light.peak_waiting == 0
    assert heavy.preemptions > 0 and heavy.peak_waiting > 0
    assert heavy.ttft_p90 > 10 * light.ttft_p90


def test_shared_prompt_moves_the_knee() -> None:
    distinct = run_closed_loop(tiny(), 16, prompt_len=660, max_tokens=300, duration=6.0)
    shared = run_closed_loop(tiny(), 16, prompt_len=660, max_tokens=300, duration=6.0, shared_prompt=True)
    assert shared.preemptions < distinct.preemptions
    assert shared.tokens > distinct.tokens


def test_sequence_dataclass_counts_prompt_and_output() -> None:
    seq = Sequence(uid=0, prompt_len=10, max_output=5, finish_reason="length", arrival=0, hashes=[])
    seq.num_output = 3
    assert seq.num_tokens == 13 and not seq.done
