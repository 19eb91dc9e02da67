"""CPU time read from Linux /proc: one process's (with its descendants, if asked) and the machine's.

The benchmarks report what their processes and the whole machine spent, so a reader can tell a
gateway that is slow from a machine that is busy; every one of them reads it here.
"""

from __future__ import annotations

import os
from pathlib import Path


def _tick() -> int:
    return os.sysconf("SC_CLK_TCK")


def process_seconds(pid: int, *, descendants: bool = False) -> float:
    """User + system CPU seconds of `pid`; with `descendants`, of its children too, recursively,
    and 0 for a process that is gone by the time it is read (a child may end meanwhile)."""
    if not descendants:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _tick()
    total = 0.0
    try:
        total += process_seconds(pid)
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                total += process_seconds(int(child), descendants=True)
    except (FileNotFoundError, ProcessLookupError):
        pass
    return total


def machine_seconds() -> tuple[float, float]:
    """(all, idle) CPU seconds of every core since boot; idle counts iowait too."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = _tick()
    return sum(values[:8]) / tick, (values[3] + values[4]) / tick
