"""The fair oracle: the best fixed limit on a dense grid, judged at the same slack as a controller.

The grid is every limit from 1 up by steps of about 1.25x (each at least one more than the last)
to twice the KV knee (the requests of the workload's mean size the KV cache holds), but no further
than twice the engine's batch nor past the workload's clients: the best fixed limit is then within
12% of the best limit there is. A fixed limit and a controller alike meet the SLA when every P90 is
within `SLACK` of its target; goodput counts only requests that met every target either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gateway.sim.profiles import Profile
from loadtests.controller.matrix import Workload

STEP = 1.25
SLACK = 1.1
"""A P90 within 10% of its target meets the SLA, for fixed limits and controllers alike."""


def knee(workload: Workload, profile: Profile) -> int:
    """Requests of the workload's mean prompt + output the KV cache holds at once."""
    mean = (sum(workload.prompt_tokens) + sum(workload.output_tokens)) / 2
    return max(1, int(profile.kv_capacity_tokens / mean))


def grid(workload: Workload, profile: Profile) -> list[int]:
    """Every limit the sweep runs: 1, then about 1.25x steps, up to the top (see the module)."""
    top = min(2 * knee(workload, profile), 2 * profile.max_num_seqs, workload.clients)
    limits = [1]
    while limits[-1] < top:
        limits.append(min(top, max(limits[-1] + 1, math.ceil(limits[-1] * STEP))))
    return limits


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
