"""The client-side SLA benchmark's own logic: its plan, reading the client's output, its verdicts,
and the wrapper that notes each answer's status and headers (against a real server on loopback)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
from aiohttp import web

from loadtests.client_sla import plan
from loadtests.client_sla.client import wrap
from loadtests.client_sla.records import Summary, summarize
from loadtests.client_sla.verdict import judge


def test_runs_interleave_targets_within_a_repetition_on_one_seed() -> None:
    cells = plan.cells([0.5, 1.5], [1.0, 0.25], ["open"])
    runs = plan.schedule(cells, repeat=2)
    assert [r.target for r in runs[:6]] == ["direct", "fixed", "gateway"] * 2
    assert len(runs) == 4 * 2 * 3
    first, second = runs[0:3], runs[3:6]
    assert {r.seed for r in first} == {first[0].seed} and first[0].seed != second[0].seed
    assert [c.name for c in cells] == [
        "open 0.5x poisson",
        "open 1.5x poisson",
        "open 0.5x burst 0.25",
        "open 1.5x burst 0.25",
    ]


def test_open_loop_sends_rate_times_duration_and_closed_loop_at_least_two_rounds() -> None:
    open_cell, closed_cell = plan.Cell("open", 1.5), plan.Cell("closed", 3.0)
    assert plan.requests_for(open_cell, capacity=7.4, max_num_seqs=32, duration_s=60) == 666
    assert plan.concurrency_for(closed_cell, 32) == 96
    assert plan.requests_for(closed_cell, capacity=1.0, max_num_seqs=32, duration_s=60) == 192


def test_client_arguments_are_vllm_bench_serve_flags() -> None:
    argv = plan.client_args("http://h:1", "m", "/tok", plan.Workload(), 10, 7, rate=3.0, burstiness=0.25)
    joined = " ".join(argv)
    assert "--goodput ttft:1500 tpot:150" in joined
    assert "--request-rate 3.0000 --burstiness 0.25" in joined
    assert "--max-concurrency" not in joined
    closed = plan.client_args("http://h:1", "m", "/tok", plan.Workload(), 10, 7, concurrency=32)
    assert closed[-2:] == ["--max-concurrency", "32"] and "--request-rate" not in closed


def _result(errors: list[str]) -> dict[str, Any]:
    return {
        "start_times": [float(i) for i in range(len(errors))],
        "errors": errors,
        "completed": sum(1 for e in errors if not e),
        "request_goodput": 2.0,
        "request_throughput": 3.0,
        "duration": 10.0,
        "p90_ttft_ms": 900.0,
        "p90_tpot_ms": 40.0,
    }


def test_refusals_are_told_from_failures_by_status_and_late_service_by_queue_wait() -> None:
    result = _result(["", "", "Too Many Requests", "Service Unavailable", "Internal Server Error", "x"])
    notes: list[dict[str, Any]] = [
        {"start_time": 0.0, "status": 200, "queue_wait": "0.2000"},
        {"start_time": 1.0, "status": 200, "queue_wait": "2.5000"},
        {"start_time": 2.0, "status": 429, "retry_after": "1", "retry_after_ms": "800"},
        {"start_time": 3.0, "status": 503},
        {"start_time": 4.0, "status": 500, "sends": 2},
    ]
    s = summarize(result, notes, ttft_target_s=1.5)
    assert (s.completed, s.refused, s.failed) == (2, 2, 2)
    assert s.refused_without_retry_after == 1 and not s.honest_refusals
    assert s.served_late == 1
    assert s.resent == 1 and s.unnoted == 1
    assert s.refused_share == 2 / 6


def _summary(goodput: float, ttft_ms: float = 1000.0, refused: int = 0, **kw: Any) -> Summary:
    base = Summary(100, goodput, 100 - refused, refused, 0, ttft_ms, 40.0, 60.0, 1.0, 0, 0, 0, 0)
    return replace(base, **kw)


def test_overload_passes_at_capacity_and_three_times_direct() -> None:
    direct = [_summary(1.0, 20_000.0)] * 3
    runs = [
        _summary(6.5, 1200.0, refused=40),
        _summary(7.0, 1300.0, refused=40),
        _summary(6.8, 1100.0, refused=40),
    ]
    v = judge(runs, direct, overloaded=True, capacity=7.4, ttft_target_ms=1500.0)
    assert v.passed, v


def test_one_repetition_under_80_percent_of_a_bound_fails_the_cell_though_the_median_passes() -> None:
    direct = [_summary(1.0, 20_000.0)] * 3
    runs = [_summary(7.0), _summary(7.0), _summary(4.0)]
    v = judge(runs, direct, overloaded=True, capacity=7.4, ttft_target_ms=1500.0)
    capacity_check = v.checks[0]
    assert capacity_check.median >= 0.8 and capacity_check.worst < 0.8 * 0.8
    assert not v.passed


def test_below_capacity_a_slower_first_token_or_refusals_fail() -> None:
    direct = [_summary(5.0, 800.0)] * 2
    assert judge(
        [_summary(5.0, 850.0)] * 2, direct, overloaded=False, capacity=7.4, ttft_target_ms=1500.0
    ).passed
    slower = judge([_summary(5.0, 2400.0)] * 2, direct, overloaded=False, capacity=7.4, ttft_target_ms=1500.0)
    refusing = judge(
        [_summary(5.0, 800.0, refused=5)] * 2, direct, overloaded=False, capacity=7.4, ttft_target_ms=1500.0
    )
    assert not slower.passed and not refusing.passed


def test_a_refusal_without_retry_after_fails_every_cell() -> None:
    direct = [_summary(1.0, 20_000.0)]
    runs = [_summary(7.0, refused=30, refused_without_retry_after=1)]
    assert not judge(runs, direct, overloaded=True, capacity=7.4, ttft_target_ms=1500.0).passed


@dataclass
class _Output:
    start_time: float = 0.0
    status: int = 0


async def _request_func(request_func_input: Any, session: Any, pbar: Any = None) -> _Output:
    """The shape of vllm bench serve's request functions: time, post, read the answer."""
    out = _Output(start_time=time.perf_counter())
    async with session.post(url=request_func_input.api_url, json={}) as response:
        await response.read()
        out.status = response.status
    return out


@dataclass
class _Input:
    api_url: str
    request_id: str


async def test_the_wrapper_notes_status_and_retry_after_of_real_answers(unused_tcp_port: int) -> None:
    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=429, headers={"Retry-After": "2", "retry-after-ms": "1500"})

    async def serve(request: web.Request) -> web.Response:
        return web.Response(text="ok", headers={"x-gateway-queue-wait": "0.0123"})

    app = web.Application()
    app.router.add_post("/refuse", refuse)
    app.router.add_post("/serve", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", unused_tcp_port)
    await site.start()
    notes: list[dict[str, Any]] = []
    noted = wrap(_request_func, notes)
    base = f"http://127.0.0.1:{unused_tcp_port}"
    try:
        async with aiohttp.ClientSession() as session:
            refused = await noted(_Input(base + "/refuse", "r-0"), session)
            served = await noted(_Input(base + "/serve", "r-1"), session)
    finally:
        await runner.cleanup()
    assert refused.status == 429 and served.status == 200
    first, second = notes
    assert (first["status"], first["retry_after"], first["retry_after_ms"], first["sends"]) == (
        429,
        "2",
        "1500",
        1,
    )
    assert first["start_time"] == refused.start_time
    assert (second["status"], second["queue_wait"], second["retry_after"]) == (200, "0.0123", None)
