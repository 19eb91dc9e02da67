from __future__ import annotations

from gateway.control.ceiling import KVCeiling
from gateway.types import EngineStats


def test_tokens_per_request_arithmetic_then_measured_footprint() -> None:
    kv = KVCeiling()
    kv.add_request(266, 266)
    assert kv.kv_ceiling() is None and kv.bound(1, 256) == 256  # no capacity known yet
    kv.observe(EngineStats(at=0.0, kv_capacity_tokens=8192))
    assert kv.capacity == 8192 and kv.kv_ceiling() == 15  # 8192 / 532 = 15.4
    # The backend runs 16 sequences holding half the cache: 256 tokens each, 32 fit.
    kv.observe(EngineStats(at=1.0, kv_usage=0.5, running=16))
    assert kv.per_running == 256.0 and kv.kv_ceiling() == 32 and kv.bound(1, 256) == 32


def test_estimates_are_smoothed() -> None:
    kv = KVCeiling()
    kv.add_request(300, 200)
    kv.add_request(0, 0)  # nothing measured: ignored
    kv.add_request(1300, 200)
    assert kv.tokens_per_request == 550.0  # 500 + 0.05 x 1000
    kv.observe(EngineStats(at=0.0, kv_capacity_tokens=1000, kv_usage=0.5, running=1))
    kv.observe(EngineStats(at=1.0, kv_usage=1.0, running=1))
    assert kv.per_running == 600.0  # 500 + 0.2 x 500


def test_a_scrape_with_nothing_running_keeps_the_footprint() -> None:
    kv = KVCeiling()
    kv.observe(EngineStats(at=0.0, kv_capacity_tokens=1000, kv_usage=0.5, running=2))
    kv.observe(EngineStats(at=1.0, kv_usage=0.0, running=0))
    assert kv.per_running == 250.0 and kv.kv_ceiling() == 4


def test_bound_is_never_below_the_floor_nor_above_the_max() -> None:
    kv = KVCeiling()
    kv.observe(EngineStats(at=0.0, kv_capacity_tokens=1000, kv_usage=1.0, running=1))
    assert kv.kv_ceiling() == 1 and kv.bound(2, 256) == 2
    kv.observe(EngineStats(at=1.0, kv_capacity_tokens=1_000_000))
    assert kv.bound(2, 256) == 256


def test_the_whole_request_ceiling_counts_every_request_at_its_full_size() -> None:
    kv = KVCeiling()
    kv.observe(EngineStats(at=0.0, kv_capacity_tokens=11_824, kv_usage=0.8, running=10))
    assert kv.whole_request_ceiling() is None  # no request seen to its end yet
    kv.add_request(788, 308)
    # In steady state a request holds its prompt and half its output: 12 fit, but 12 at their
    # full 1,096 tokens need 13,152, so vLLM would preempt as they grow; 10 always fit.
    assert kv.kv_ceiling() == 12 and kv.whole_request_ceiling() == 10


def test_a_prefix_the_cache_holds_counts_once_in_the_whole_request_ceiling() -> None:
    kv = KVCeiling()
    kv.add_request(680, 150)
    kv.observe(EngineStats(at=0.0, kv_capacity_tokens=8192, prefix_hit_share=None))
    assert kv.whole_request_ceiling() == 9  # 8192 / 830: nothing shared known
    for at in range(1, 60):
        # 512 of each 680-token prompt found in the prefix cache: a shared system prompt.
        kv.observe(EngineStats(at=float(at), prefix_hit_share=512 / 680))
    # (8192 - 512) / (830 - 512) = 24.2: the shared 512 tokens are held once, not per request.
    assert kv.whole_request_ceiling() == 24
    kv.observe(EngineStats(at=60.0))  # a scrape that looked nothing up leaves the share as is
    assert kv.whole_request_ceiling() == 24


def test_before_any_request_has_finished_declared_sizes_say_what_a_burst_may_bring() -> None:
    kv = KVCeiling()
    kv.observe(EngineStats(at=0.0, kv_capacity_tokens=8192, kv_usage=0.25, running=8))
    kv.declared(300)
    kv.declared(340)  # 200-token prompts, estimated 180 and 220, that allow 120 output tokens
    assert kv.burst_ceiling() == 25  # 8192 / 320
    assert kv.whole_request_ceiling() is None  # what the algorithm grows on: measured sizes only
    assert kv.kv_ceiling() == 32  # the measured footprint, not what requests say they may take
    kv.add_request(200, 40)  # the first answer: what requests hold is known now
    assert kv.burst_ceiling() == kv.whole_request_ceiling() == 34  # 8192 / 240
    kv.declared(1200)
    assert kv.burst_ceiling() == 34
