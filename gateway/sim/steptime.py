"""Step time of one engine iteration over a batch.

    t_step = T0 + sqrt(T_mem^2 + (alpha * N_tokens)^2) + beta * KV_tokens_in_batch + gamma * N_seqs

A decode step is memory-bound (reading the weights once serves the whole batch: T_mem), a prefill
chunk is compute-bound (alpha per token); the root-sum-square blends the two regimes smoothly and is
dominated by the larger. Attention reads every cached token of every scheduled sequence (beta).
gamma is a per-sequence cost (sampling, bookkeeping) that a CPU engine shows and a GPU hides.
Source: the roofline model (Williams et al., "Roofline", CACM 2009): a computation is bound by its
memory traffic or by its arithmetic, whichever takes longer.
"""

from __future__ import annotations

import math

from gateway.sim.profiles import Profile


def step_time(profile: Profile, num_tokens: int, kv_tokens: int, num_seqs: int = 0) -> float:
    if num_tokens <= 0:
        return 0.0
    compute = profile.step_per_token * num_tokens
    return (
        profile.step_base
        + math.sqrt(profile.step_mem * profile.step_mem + compute * compute)
        + profile.step_per_kv_token * kv_tokens
        + profile.step_per_seq * num_seqs
    )
