"""`make loadtest-check`: the demo is started, loaded, stopped, and the thresholds decide the exit."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest
from locust_runs import ROOT

from loadtests.locust_check import summarize

pytestmark = pytest.mark.slow


def test_loadtest_check_fails_on_a_ttft_threshold_below_what_the_demo_can_do(tmp_path: Path) -> None:
    cmd = [
        "make", "--no-print-directory", "-o", ".venv/.installed", "loadtest-check",
        "USERS=3", "DURATION=3s", "FAIL_RATE=0", "TTFT_P90=0.0001", f"RESULTS={tmp_path}",
        "LOCUST_ARGS=--output-tokens fixed:16 --prompt-tokens fixed:8",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "FAIL: P90 TTFT" in output and "failure rate" not in output, output
    summary = summarize(tmp_path / "loadtest-check_stats.csv")
    assert summary.requests > 0 and summary.failures == 0 and summary.ttft_p90 is not None
    assert (tmp_path / "loadtest-check.html").stat().st_size > 0
    # the demo was stopped: nothing listens on its port any more
    port = int(re.search(r"demo on 127\.0\.0\.1:(\d+)", output).group(1))  # type: ignore[union-attr]
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0
