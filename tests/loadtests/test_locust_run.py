"""Real Locust runs, headless, against a simulated vLLM server and the gateway over loopback.

The runs start together (one module fixture) and take a few seconds; the tests read their CSVs.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from locust_runs import ROOT, LocustRun, start_locust

from loadtests.locust_check import main as check_main
from loadtests.locust_check import summarize
from tests import procs

pytestmark = pytest.mark.slow

STREAM = "/v1/chat/completions stream"
COMPLETION = "/v1/completions"
OUTPUT_TOKENS = 24
REQUESTS = (
    "--mix", "chat-stream=3,completion=1",
    "--output-tokens", f"fixed:{OUTPUT_TOKENS}", "--prompt-tokens", "uniform:8,16",
)  # fmt: skip

# One slot and a queue of one: with six users the gateway must turn most of them away.
TIGHT_GATEWAY = """\
backends:
  - url: {backend}
    min_concurrency: 1
    max_concurrency: 1
controller:
  algorithm: fixed
  params: {{limit: 1}}
queue:
  max_depth: 1
  timeout: 5
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocustRun]]:
    out = tmp_path_factory.mktemp("locust")
    with ExitStack() as stack:
        healthy = stack.enter_context(procs.spawn_sim("--model", "test-model"))
        stepped = stack.enter_context(procs.spawn_sim("--model", "test-model"))
        failing = stack.enter_context(
            procs.spawn_sim("--model", "test-model", "--error-rate", "1", "--error-status", "503")
        )
        behind = stack.enter_context(procs.spawn_sim("--model", "test-model"))
        config = out / "gateway.yaml"
        config.write_text(TIGHT_GATEWAY.format(backend=behind.url))
        port = procs.free_port()
        gateway = stack.enter_context(
            procs.spawn(
                [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config),
                 "--port", str(port)],
                f"http://127.0.0.1:{port}/health",
                base_url=f"http://127.0.0.1:{port}",
            )
        )  # fmt: skip
        started = {
            "healthy": start_locust(healthy.url, out / "healthy", "-u", "4", "-t", "3s", *REQUESTS),
            "shed": start_locust(
                gateway.url, out / "shed", "-u", "6", "-r", "6", "-t", "3s", *REQUESTS
            ),
            # think time: users meeting instant errors would otherwise spin and starve the others
            "failing": start_locust(
                failing.url, out / "failing", "-u", "2", "-t", "2s", "--think-time", "0.05",
                *REQUESTS,
            ),
            "refused": start_locust(
                f"http://127.0.0.1:{procs.free_port()}", out / "refused", "-u", "1", "-t", "1s",
                "--think-time", "0.1", "--model", "test-model", *REQUESTS,
            ),
            "step": start_locust(
                stepped.url, out / "step", "--shape", "step", "--step-levels", "1,2,4",
                "--step-time", "1.5", "--sla-ttft-p90", "5", *REQUESTS,
            ),
        }  # fmt: skip
        codes = {name: run.wait(60) for name, run in started.items()}
        for name, run in started.items():
            assert run.stats.exists(), f"{name}: no stats CSV (exit {codes[name]}):\n{run.output()}"
        # Locust exits 1 when any request failed, 0 otherwise.
        assert codes == {"healthy": 0, "shed": 0, "failing": 1, "refused": 1, "step": 0}, codes
        yield started


def count(row: dict[str, str]) -> int:
    return int(row["Request Count"])


def test_streams_report_ttft_tpot_and_tokens(runs: dict[str, LocustRun]) -> None:
    rows = runs["healthy"].rows()
    stream, completion = rows[("POST", STREAM)], rows[("POST", COMPLETION)]
    assert count(stream) > 0 and count(completion) > 0
    assert stream["Failure Count"] == completion["Failure Count"] == "0"
    ttft, tpot = rows[("TTFT", STREAM)], rows[("TPOT", STREAM)]
    # every successful stream gave one TTFT and one TPOT measurement
    assert count(ttft) == count(tpot) == count(stream)
    e2e_ms = float(stream["Average Response Time"])
    ttft_ms, tpot_ms = float(ttft["Average Response Time"]), float(tpot["Average Response Time"])
    assert 0 < ttft_ms < e2e_ms
    assert 0 < tpot_ms < e2e_ms / 2
    # e2e = TTFT + (tokens - 1) * TPOT holds only if the usage chunk reported all 24 tokens
    assert ttft_ms + (OUTPUT_TOKENS - 1) * tpot_ms == pytest.approx(e2e_ms, rel=0.01)
    assert float(ttft["90%"]) >= float(ttft["50%"]) > 0


def test_tokens_come_from_usage_for_both_kinds(runs: dict[str, LocustRun]) -> None:
    rows = runs["healthy"].rows()
    for name in (STREAM, COMPLETION):
        rate = rows[("tokens_per_s", name)]
        assert count(rate) == count(rows[("POST", name)])
        # ignore_eos makes every answer exactly max_tokens long; the content size carries it
        assert float(rate["Average Content Size"]) == OUTPUT_TOKENS
        # per request, tokens/s = 24 / request time: the fastest request has the highest rate
        post = rows[("POST", name)]
        fastest, slowest = float(post["Min Response Time"]), float(post["Max Response Time"])
        assert float(rate["Max Response Time"]) == pytest.approx(OUTPUT_TOKENS * 1000 / fastest, rel=0.01)
        assert float(rate["Min Response Time"]) == pytest.approx(OUTPUT_TOKENS * 1000 / slowest, rel=0.01)
    assert ("TTFT", COMPLETION) not in rows  # no first token is visible without streaming


def test_shed_answers_are_counted_apart_from_failures(runs: dict[str, LocustRun]) -> None:
    rows = runs["shed"].rows()
    shed = [r for (kind, _), r in rows.items() if kind == "SHED"]
    assert sum(count(r) for r in shed) > 0
    assert all(r["Failure Count"] == "0" for r in shed)
    assert rows[("POST", STREAM)]["Failure Count"] == "0"
    assert count(rows[("TTFT", STREAM)]) > 0  # the admitted requests were still measured
    failures = Path(f"{runs['shed'].prefix}_failures.csv").read_text().splitlines()
    assert failures[1:] == []


def test_errors_without_retry_after_are_failures(runs: dict[str, LocustRun]) -> None:
    rows = runs["failing"].rows()
    posts = [r for (kind, _), r in rows.items() if kind == "POST"]
    assert sum(count(r) for r in posts) > 0
    assert all(r["Failure Count"] == r["Request Count"] for r in posts)
    assert not [key for key in rows if key[0] in ("SHED", "TTFT", "TPOT", "tokens_per_s")]
    with Path(f"{runs['failing'].prefix}_failures.csv").open(newline="") as f:
        errors = [row["Error"] for row in csv.DictReader(f)]
    assert errors and all("HTTP 503" in e for e in errors)


def test_a_server_that_is_not_there_is_a_failure(runs: dict[str, LocustRun]) -> None:
    rows = runs["refused"].rows()
    posts = [r for (kind, _), r in rows.items() if kind == "POST"]
    assert posts and all(r["Failure Count"] == r["Request Count"] != "0" for r in posts)
    with Path(f"{runs['refused'].prefix}_failures.csv").open(newline="") as f:
        assert all("no answer" in row["Error"] for row in csv.DictReader(f))


def test_step_shape_writes_the_sweep_table(runs: dict[str, LocustRun]) -> None:
    with Path(f"{runs['step'].prefix}_steps.csv").open(newline="") as f:
        levels = list(csv.DictReader(f))
    assert [row["users"] for row in levels] == ["1", "2", "4"]
    assert all(int(row["requests"]) > 0 and float(row["tokens_per_s"]) > 0 for row in levels)
    assert all(0 < float(row["ttft_p90"]) < 5 for row in levels)
    log = runs["step"].output()
    assert "step sweep" in log and "largest level with P90 TTFT <= 5 s: 4 users" in log


def test_checker_passes_and_fails_on_ttft(runs: dict[str, LocustRun]) -> None:
    prefix = str(runs["healthy"].prefix)
    p90 = summarize(runs["healthy"].stats).ttft_p90
    assert p90 is not None and p90 > 0
    assert check_main([prefix, "--max-fail-rate", "0", "--max-ttft-p90", str(p90 * 1.5)]) == 0
    assert check_main([prefix, "--max-fail-rate", "0", "--max-ttft-p90", str(p90 / 2)]) == 1


def test_checker_fails_on_failure_rate_but_not_on_shedding(runs: dict[str, LocustRun]) -> None:
    failing, shed = str(runs["failing"].prefix), str(runs["shed"].prefix)
    # every inference request failed; only the model look-up (GET /v1/models) succeeded
    summary = summarize(runs["failing"].stats)
    assert summary.failures == summary.requests - 2 and summary.failure_rate > 0.9
    assert check_main([failing, "--max-fail-rate", "0.5"]) == 1
    assert check_main([failing, "--max-fail-rate", "1"]) == 0
    summary = summarize(runs["shed"].stats)
    assert summary.failures == 0 and 0 < summary.shed_rate < 1
    assert check_main([shed, "--max-fail-rate", "0"]) == 0
    assert check_main([shed, "--max-fail-rate", "0", "--max-shed-rate", "0"]) == 1
    # a streaming threshold over a run whose streams all failed cannot pass
    assert check_main([failing, "--max-ttft-p90", "100"]) == 1


def test_checker_command_line_exit_codes(runs: dict[str, LocustRun], tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "loadtests.locust_check", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False, cwd=ROOT)

    failed = run(str(runs["failing"].prefix), "--max-fail-rate", "0.01")
    assert failed.returncode == 1 and "FAIL: failure rate 0.9" in failed.stderr
    passed = run(str(runs["healthy"].stats), "--max-fail-rate", "0.01", "--max-ttft-p90", "30")
    assert passed.returncode == 0 and "PASS" in passed.stdout
    assert run(str(tmp_path / "missing")).returncode == 2
