"""Run one scenario in one mode: start the backends (and gateway), drive the load, record everything.

Each run starts fresh processes (two simulated vLLM servers, and the gateway unless the mode is
`direct`), so runs never share state and the gateway's peak RSS belongs to that run alone. Faults
are applied at their scheduled times through the servers' `POST /sim/faults`. After the load and
its drain, the gateway is watched until it is idle again (no request in flight or queued).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from loadtests.scenarios.definitions import Scenario, gateway_config, sim_args
from loadtests.scenarios.loadgen import LoadGen, Record
from loadtests.scenarios.sampler import Sampler, Tick
from tests.procs import Proc, spawn_gateway, spawn_sim

IDLE_WAIT = 15.0
MODEL = "tiny-llama"


@dataclass(slots=True)
class RunData:
    scenario: Scenario
    mode: str
    records: list[Record]
    ticks: list[Tick]
    event_times: list[tuple[float, str]] = field(default_factory=list)
    peak_rss_mb: float | None = None
    idle_after_s: float | None = None
    """Seconds from the end of the drain until the gateway had nothing in flight or queued."""
    final_state: dict[str, Any] | None = None
    wall_s: float = 0.0


async def _post_faults(session: aiohttp.ClientSession, url: str, faults: dict[str, object]) -> None:
    async with session.post(f"{url}/sim/faults", json=faults) as resp:
        resp.raise_for_status()


async def _apply_events(
    scenario: Scenario, sims: list[Proc], gen: LoadGen, log: list[tuple[float, str]]
) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        for event in sorted(scenario.events, key=lambda e: e.at):
            delay = event.at - gen.now()
            if delay > 0:
                await asyncio.sleep(delay)
            targets = sims if event.backend is None else [sims[event.backend]]
            await asyncio.gather(*(_post_faults(session, s.url, event.faults) for s in targets))
            log.append((gen.now(), event.label))


async def _drive(scenario: Scenario, gen: LoadGen) -> None:
    loops = []
    for stream in scenario.streams:
        if stream.kind == "open":
            loops.append(gen.open_loop(stream.workload, stream.rate, scenario.duration))
        elif stream.kind == "closed":
            loops.append(gen.closed_loop(stream.workload, stream.users, scenario.duration))
        else:
            gen.burst(stream.workload, stream.count)
    await asyncio.gather(*loops)
    # A burst is waited for up to the scenario's duration; other loads get the drain time.
    remaining = scenario.duration - gen.now() if not loops else 0.0
    await gen.drain(max(0.0, remaining) + scenario.drain_seconds)


async def _wait_idle(url: str, limit_s: float) -> tuple[float | None, dict[str, Any] | None]:
    start = time.perf_counter()
    state: dict[str, Any] | None = None
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while time.perf_counter() - start < limit_s:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(f"{url}/admin/state") as resp:
                    state = await resp.json()
                inflight = sum(int(b.get("inflight", 0)) for b in state.get("backends", []))
                depth = sum(int(m.get("depth", 0)) for m in state.get("models", {}).values())
                if inflight == 0 and depth == 0:
                    return time.perf_counter() - start, state
            await asyncio.sleep(0.2)  # polling an external process's state; it gives no signal
    return None, state


async def run_async(
    scenario: Scenario,
    mode: str,
    params: dict[str, object] | None = None,
    seed: int = 0,
    controller: dict[str, object] | None = None,
) -> RunData:
    wall = time.perf_counter()
    with contextlib.ExitStack() as stack:
        sims = [stack.enter_context(spawn_sim(*sim_args(seed * 10 + i))) for i in range(2)]
        gateway: Proc | None = None
        if mode != "direct":
            config = gateway_config(mode, [s.url for s in sims], scenario, params, controller)
            gateway = stack.enter_context(spawn_gateway(config))
        urls = [gateway.url] if gateway else [s.url for s in sims]
        events: list[tuple[float, str]] = []
        gen = LoadGen(urls, MODEL, retry=scenario.retry, request_timeout=scenario.request_timeout, seed=seed)
        async with gen:
            sampler = Sampler(
                [s.url for s in sims],
                gateway.url if gateway else None,
                gateway.pid if gateway else None,
                gen.now,
            )
            async with sampler:
                fault_task = asyncio.create_task(_apply_events(scenario, sims, gen, events))
                try:
                    await _drive(scenario, gen)
                finally:
                    fault_task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await fault_task
        data = RunData(scenario, mode, gen.records, sampler.ticks, events)
        if gateway is not None:
            data.idle_after_s, data.final_state = await _wait_idle(gateway.url, IDLE_WAIT)
            data.peak_rss_mb = sampler.read_peak()
    data.wall_s = time.perf_counter() - wall
    return data


def run(
    scenario: Scenario,
    mode: str,
    params: dict[str, object] | None = None,
    seed: int = 0,
    controller: dict[str, object] | None = None,
) -> RunData:
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.run(run_async(scenario, mode, params, seed, controller))
    return uvloop.run(run_async(scenario, mode, params, seed, controller))
