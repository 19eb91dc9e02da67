"""One run of the routing benchmark: every strategy side by side, each on its own fresh backends.

The machine this runs on is shared, and how much CPU the simulated engines get moves from minute
to minute; strategies measured one after another would each meet another machine. So the
strategies run at the same time, each with its own gateway and four simulated vLLM servers
started anew (no run inherits another's prefix caches) and its own 200 users drawing the same
requests: whatever slows the machine slows all of them alike.

Users start at random moments within their first think time, send, wait for the whole answer,
think (exponential, the workload's mean unless `think` is set, over the engines' speed), and send
again. The window opens once every user has had an answer, at least `warmup` seconds in, and at
the same moment for every strategy: the backends' prefix-cache counters, every process's CPU time
and the machine's are read at both ends, each gateway's `/admin/state` is sampled every 0.25 s for
the load spread, and the answers that end inside the window are the run's.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import aiohttp

from gateway.config import RoutingConfig
from gateway.pool.vllm_metrics import parse_vllm_metrics
from loadtests.http_client import Answer, Connection
from loadtests.proc_cpu import machine_seconds, process_seconds
from loadtests.routing.workloads import Workload
from tests.procs import Proc, spawn_gateway, spawn_sim

MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"
# Llama-3-8B in bf16 with step times estimated for an A100 40GB (T_mem 9.7 ms, alpha 0.066 ms/token,
# beta 0.08 us); the KV cache and the pace are `Setup`'s (an A10's by default).
ENGINE = (
    "--profile", "llama3-8b-h100", "--step-mem", "0.0097", "--step-per-token", "6.6e-05",
    "--step-per-kv-token", "8e-08",
)  # fmt: skip
SPREAD_INTERVAL = 0.25
WARM_TIMEOUT = 120.0
"""Longest wait past `warmup` for every user's first answer."""


@dataclass(frozen=True, slots=True)
class Setup:
    backends: int = 4
    limit: int = 16
    users: int = 200
    think: float = 0.0
    """Mean think time in seconds; 0: the workload's own."""
    max_tokens: int = 32
    kv_blocks: int = 2048
    """KV-cache blocks of 16 tokens per backend: 32,768 tokens, what vLLM leaves for the KV cache of
    Llama-3-8B in bf16 on a 24 GB GPU (an A10 or A10G: 0.9 x 22.5 GiB, less 15 GiB of weights and
    about 1.3 GiB of activations, leaves 4 GiB, at 128 KiB per token)."""
    speed: float = 0.4
    """The engines' pace (the simulator's speed fault) against the A100 step times: an A10 has 0.40x
    an A100 40GB's bf16 tensor throughput (125 against 312 TFLOPS) and 0.39x its memory bandwidth
    (600 against 1,555 GB/s). Think times scale with it."""
    warmup: float = 10.0
    window: float = 30.0
    lookahead: int = RoutingConfig().lookahead


@dataclass(slots=True)
class Window:
    """What was read at both ends of the measured window."""

    at: float
    prefix: tuple[float, float]
    """(queries, hits) summed over the backends, in tokens."""
    cpu: dict[str, float]
    """CPU seconds so far: 'client', 'gateway', 'sims', and 'machine' / 'machine_idle' (all cores)."""


@dataclass(slots=True)
class Raw:
    answers: list[Answer]
    start: Window
    end: Window
    spread: list[tuple[list[int], list[int]]] = field(default_factory=list)
    """(inflight, limit) per backend at each sample."""
    errors: list[str] = field(default_factory=list)


@contextlib.contextmanager
def processes(setup: Setup, strategy: str, seed: int) -> Iterator[tuple[list[Proc], Proc]]:
    def sim(i: int) -> Proc:
        return spawn_sim(
            *ENGINE,
            "--num-gpu-blocks",
            str(setup.kv_blocks),
            "--speed",
            str(setup.speed),
            "--seed",
            str(seed * 10 + i),
            timeout=60,
        )

    with contextlib.ExitStack() as stack, ThreadPoolExecutor(setup.backends) as pool:
        futures = [pool.submit(sim, i) for i in range(setup.backends)]
        sims = [stack.enter_context(f.result()) for f in futures]
        config = {
            "backends": [
                {"url": s.url, "name": f"sim-{i}", "max_concurrency": setup.limit} for i, s in enumerate(sims)
            ],
            "controller": {"algorithm": "fixed", "params": {"limit": setup.limit}},
            "routing": {"strategy": strategy, "lookahead": setup.lookahead},
            # Long enough that a cold start's first drain-rate estimate sheds nobody.
            "queue": {"max_depth": 4096, "timeout": 3600},
            "health": {"interval": 0.5},
        }
        gateway = stack.enter_context(spawn_gateway(config, timeout=60))
        yield sims, gateway


async def measure(
    setup: Setup, workload: Workload, sims: list[Proc], gateway: Proc, seed: int, gate: asyncio.Barrier
) -> Raw:
    """Drive the users; open the window once every user has had an answer (so each conversation's
    history is where its router put it), at least `warmup` seconds in, and together with the
    strategies running beside this one (`gate`)."""
    answers: list[Answer] = []
    errors: list[str] = []
    answered: set[int] = set()
    warm = asyncio.Event()
    stop = asyncio.Event()
    think = (setup.think or workload.think) / setup.speed

    async def user(u: int) -> None:
        rng = random.Random(seed * 100_003 + u)
        conn = Connection.to(gateway.url)
        await asyncio.sleep(rng.uniform(0, think))
        try:
            while not stop.is_set():
                try:
                    answer = await conn.post(workload.path, workload.body(u), workload.marker)
                except (OSError, asyncio.IncompleteReadError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    conn.close()
                    continue
                answers.append(answer)
                if answer.status == 200:
                    workload.answered(u)
                    answered.add(u)
                    if len(answered) == setup.users:
                        warm.set()
                else:
                    errors.append(f"HTTP {answer.status}")
                await asyncio.sleep(rng.expovariate(1 / think))
        finally:
            conn.close()

    pids = {"gateway": [gateway.pid], "sims": [s.pid for s in sims]}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        tasks = [asyncio.create_task(user(u)) for u in range(setup.users)]
        try:
            await asyncio.sleep(setup.warmup)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(warm.wait(), WARM_TIMEOUT)
            await gate.wait()
            start = await _read(http, sims, pids)
            spread = await _sample_spread(http, gateway.url, setup.window)
            end = await _read(http, sims, pids)
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return Raw(answers, start, end, spread, errors)


async def _sample_spread(
    http: aiohttp.ClientSession, url: str, seconds: float
) -> list[tuple[list[int], list[int]]]:
    samples: list[tuple[list[int], list[int]]] = []
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    while (left := until - loop.time()) > 0:
        async with http.get(f"{url}/admin/state") as resp:
            backends = (await resp.json())["backends"]
        samples.append(([b["inflight"] for b in backends], [b["limit"] for b in backends]))
        await asyncio.sleep(min(SPREAD_INTERVAL, left))
    return samples


async def _read(http: aiohttp.ClientSession, sims: list[Proc], pids: dict[str, list[int]]) -> Window:
    queries = hits = 0.0
    for sim in sims:
        async with http.get(f"{sim.url}/metrics") as resp:
            scrape = parse_vllm_metrics(await resp.text())
        queries += scrape.prefix_queries or 0.0
        hits += scrape.prefix_hits or 0.0
    cpu = {name: sum(map(process_seconds, group)) for name, group in pids.items()}
    cpu["client"] = time.process_time()
    cpu["machine"], cpu["machine_idle"] = machine_seconds()
    return Window(time.perf_counter(), (queries, hits), cpu)


def run(setup: Setup, workload: Callable[[], Workload], strategies: list[str], seed: int) -> dict[str, Raw]:
    """Each strategy's readings, all measured over the same wall-clock window."""
    import uvloop

    with contextlib.ExitStack() as stack:
        procs = [stack.enter_context(processes(setup, strategy, seed)) for strategy in strategies]

        async def together() -> list[Raw]:
            gate = asyncio.Barrier(len(procs))
            runs = (measure(setup, workload(), sims, gateway, seed, gate) for sims, gateway in procs)
            return await asyncio.gather(*runs)

        return dict(zip(strategies, uvloop.run(together()), strict=True))
