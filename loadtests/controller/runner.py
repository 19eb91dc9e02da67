"""One run of the real-engine evaluation: a mode's load, its summary and its raw record.

`direct` sends the closed loop straight to the engine. Every other mode starts a fresh
`llm-gateway serve` (from this checkout) in front of the engine, polls its /admin/state once a
second while the load runs (the limit it holds, the engine's counts, and `sla_infeasible` when the
controller has it), and stops it by its pid. Between runs the engine is given time to finish or
abort what the last run left (nothing running or waiting), so one run's tail never lands in the
next.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from statistics import mean
from typing import Any

import aiohttp

from loadtests import closed_loop
from loadtests.controller.plan import Mode, Run
from loadtests.controller.verdict import RunSummary
from loadtests.engine_metrics import wait_idle
from tests.procs import spawn_gateway

QUEUE = {"max_depth": 1024, "timeout": 600}
"""Nothing is shed: every mode serves the same closed loop, and the queue holds the excess."""


def gateway_config(engine_url: str, mode: Mode, targets: Mapping[str, float]) -> dict[str, object]:
    controller: dict[str, object] = {"algorithm": mode.algorithm}
    if mode.limit is not None:
        controller["params"] = {"limit": mode.limit}
    elif mode.controller is not None and mode.controller.params:
        controller["params"] = dict(mode.controller.params)
    return {
        "backends": [engine_url],
        "sla": {f"{signal}_p90": round(value, 4) for signal, value in targets.items()},
        "controller": controller,
        "queue": QUEUE,
    }


def infeasible_flag(backend: Mapping[str, Any]) -> bool | None:
    """`sla_infeasible` of one backend in /admin/state as a bool; None when the field is absent."""
    if "sla_infeasible" not in backend:
        return None
    value = backend["sla_infeasible"]
    if isinstance(value, Mapping):
        return bool(value.get("infeasible", value.get("active", bool(value))))
    return bool(value)


ENGINE_COUNTS = ("running", "waiting", "outside_engine", "kv_usage", "preemptions_total")
"""What vLLM's last scrape said, kept beside each state: why a limit moved is often there."""


async def _poll_state(url: str, states: list[dict[str, Any]], stop: asyncio.Event) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while not stop.is_set():
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                async with session.get(url + "/admin/state") as response:
                    state = await response.json()
                    backend = state["backends"][0]
                    states.append(
                        {
                            "at": time.monotonic(),
                            "limit": backend.get("limit"),
                            "inflight": backend.get("inflight"),
                            "sla_infeasible": infeasible_flag(backend),
                            "last_decision": backend.get("last_decision"),
                            "p90": backend.get("p90"),
                            "tokens_per_event": backend.get("tokens_per_event"),
                            **{key: backend.get(key) for key in ENGINE_COUNTS},
                        }
                    )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=1.0)


async def _drive(
    url: str, load: closed_loop.Workload, state_url: str | None
) -> tuple[closed_loop.RunResult, list[dict[str, Any]]]:
    states: list[dict[str, Any]] = []
    stop = asyncio.Event()
    poller = asyncio.create_task(_poll_state(state_url, states, stop)) if state_url else None
    result = await closed_loop.run(url, load)
    stop.set()
    if poller is not None:
        await poller
    return result, states


def execute(
    run: Run, engine_url: str, load: closed_loop.Workload, gateway_targets: Mapping[str, float]
) -> tuple[closed_loop.RunResult, list[dict[str, Any]]]:
    """Run one mode's load; the gateway (if any) is fresh and stopped before this returns."""
    if run.mode.algorithm is None:
        outcome = asyncio.run(_drive(engine_url, load, None))
    else:
        config = gateway_config(engine_url, run.mode, gateway_targets)
        with spawn_gateway(config, timeout=60) as gateway:
            outcome = asyncio.run(_drive(gateway.url, load, gateway.url))
    asyncio.run(wait_idle(engine_url))
    return outcome


def summarize(
    run: Run,
    result: closed_loop.RunResult,
    states: Sequence[Mapping[str, Any]],
    targets: Mapping[str, Mapping[str, float]],
) -> RunSummary:
    """The run's numbers; goodput for every level in `targets` (the records judge them all)."""
    begin, end = result.window()
    limits = [float(s["limit"]) for s in states if s.get("limit") is not None and begin <= s["at"] < end]
    flags = [s["sla_infeasible"] for s in states if s.get("sla_infeasible") is not None]
    mode = run.mode
    kind = "direct" if mode.algorithm is None else "fixed" if mode.algorithm == "fixed" else "adaptive"
    return RunSummary(
        workload=run.workload.name,
        repetition=run.repetition,
        mode=mode.name,
        kind=kind,
        level=mode.level,
        controller=None if mode.controller is None else mode.controller.label,
        throughput=result.tokens_per_s(),
        goodput={level: result.tokens_per_s(dict(t)) for level, t in targets.items()},
        p90=result.p90s(),
        client_cpu=result.cpu_share(),
        sla_infeasible=bool(flags[-1]) if flags else None,
        limit_mean=mean(limits) if limits else None,
        limit_min=min(limits) if limits else None,
        limit_max=max(limits) if limits else None,
        failures=result.failures,
        requests=len(result.ok),
    )


def raw_record(result: closed_loop.RunResult) -> list[list[Any]]:
    """Per-request rows relative to the run's start: start, first token, last token, end (s),
    tokens, max_tokens, status, queue wait (s), finished, error."""

    def rel(t: float | None) -> float | None:
        return None if t is None else round(t - result.started, 4)

    return [
        [
            rel(r.start),
            rel(r.first_token),
            rel(r.last_token),
            rel(r.end),
            r.completion_tokens,
            r.max_tokens,
            r.status,
            round(r.queue_wait, 4),
            r.finished,
            r.error,
        ]
        for r in result.records
    ]
