"""scripts/vllm_cpu/engine.py: the command that starts the engine at the niceness asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.vllm.real_engine import load_script

engine = load_script("engine")


def _niceness_under(settings: Any) -> int:
    """Run a Python that prints its own niceness behind the command's prefix (what precedes the
    engine's interpreter)."""
    cmd = engine.command(settings)
    prefix = cmd[: cmd.index(str(settings.python))]
    probe = [sys.executable, "-c", "import os; print(os.nice(0))"]
    return int(subprocess.run([*prefix, *probe], check=True, capture_output=True, text=True).stdout)


def test_the_engine_runs_at_the_niceness_asked_for() -> None:
    base = _niceness_under(engine.EngineSettings(venv=Path("/v")))
    assert _niceness_under(engine.EngineSettings(venv=Path("/v"), nice=7)) == base + 7


def test_no_niceness_starts_the_interpreter_itself() -> None:
    settings = engine.EngineSettings(venv=Path("/v"))
    assert engine.command(settings)[0] == str(settings.python)
