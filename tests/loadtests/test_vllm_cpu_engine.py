"""scripts/vllm_cpu/engine.py: the command that starts the engine at the niceness asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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
    assert _niceness_under(engine.EngineSettings(venv=Path("/v"), nice=7)) == min(base + 7, 19)


def test_no_niceness_starts_the_interpreter_itself() -> None:
    settings = engine.EngineSettings(venv=Path("/v"))
    assert engine.command(settings)[0] == str(settings.python)


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="no autogroup scheduling here")
def test_the_engines_session_is_niced_against_the_other_sessions() -> None:
    # The engine leads a session of its own; under autogroup scheduling its session's niceness,
    # not its processes', ranks it against the gateway's.
    # The caller's own file reads empty where its session is the kernel's root group.
    own = Path("/proc/self/autogroup").read_text()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        engine.renice_session(proc.pid, 7)
        assert Path(f"/proc/{proc.pid}/autogroup").read_text().split()[-1] == "7"
        assert Path("/proc/self/autogroup").read_text() == own
    finally:
        proc.kill()
        proc.wait()
