"""Running the plan: the engine's capacity, the fixed limit's sweep, then every run, each summarized.

Capacity is the engine's request rate in a closed loop of `max_num_seqs` clients straight at it (as
many as it batches at once, so it is never idle and never queues in front of itself for long). The
fixed limit is the concurrency, among a few fractions of `max_num_seqs`, whose closed loop straight
at the engine had the highest goodput: the best a hand-tuned limit does with this workload. Every
gateway run gets a fresh gateway (nothing learnt carries over), and the engine is left to go idle
between runs so one run's tail never lands in the next.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loadtests.client_sla import plan, records, servers
from loadtests.client_sla.worker import Worker
from loadtests.engine_metrics import wait_idle
from tests.procs import ROOT


@dataclass(frozen=True, slots=True)
class Setup:
    engine_url: str
    model: str
    tokenizer: str
    max_num_seqs: int
    workload: plan.Workload
    duration_s: float
    out: Path
    gateway_checkout: Path = ROOT
    candidate_checkout: Path | None = None
    controller: dict[str, Any] = field(default_factory=dict)
    """Merged into the adaptive gateways' `controller` config (not the fixed limit's)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    run: plan.Run
    summary: records.Summary
    requests_sent: int


class Bench:
    def __init__(self, setup: Setup, worker: Worker) -> None:
        self.setup = setup
        self.worker = worker
        (setup.out / "raw").mkdir(parents=True, exist_ok=True)

    def client(self, name: str, base_url: str, num_prompts: int, seed: int, **load: Any) -> records.Summary:
        """One vllm bench serve run against `base_url`, its result and notes kept under raw/."""
        s = self.setup
        argv = plan.client_args(base_url, s.model, s.tokenizer, s.workload, num_prompts, seed, **load)
        raw = s.out / "raw"
        argv += ["--result-dir", str(raw), "--result-filename", f"{name}.json", "--label", name]
        side = raw / f"{name}.notes.json"
        self.worker.ask({"argv": argv, "side": str(side)})
        result = json.loads((raw / f"{name}.json").read_text())
        notes = json.loads(side.read_text())
        asyncio.run(wait_idle(s.engine_url, timeout_s=300))
        return records.summarize(result, notes, s.workload.ttft_ms / 1000)

    def closed(self, name: str, concurrency: int, num_prompts: int, seed: int = 0) -> records.Summary:
        return self.client(name, self.setup.engine_url, num_prompts, seed, concurrency=concurrency)

    def capacity(self, rounds: int = 8) -> float:
        n = self.setup.max_num_seqs
        summary = self.closed("capacity", n, rounds * n)
        return summary.throughput

    def sweep(self, capacity: float, fractions: Sequence[float]) -> tuple[int, dict[int, float]]:
        """The concurrency with the best closed-loop goodput straight at the engine, and every one's."""
        n = self.setup.max_num_seqs
        goodputs = {}
        for limit in sorted({max(1, round(f * n)) for f in fractions}):
            prompts = max(4 * limit, round(capacity * self.setup.duration_s / 2))
            goodputs[limit] = self.closed(f"sweep-{limit}", limit, prompts).goodput
        return max(goodputs, key=lambda k: goodputs[k]), goodputs

    def target(self, name: str, fixed_limit: int) -> AbstractContextManager[str]:
        s = self.setup
        if name == "direct":
            return nullcontext(s.engine_url)
        limit = fixed_limit if name == "fixed" else None
        config = servers.gateway_config(
            s.engine_url, s.workload.ttft_ms / 1000, s.workload.tpot_ms / 1000, limit
        )
        if limit is None and s.controller:
            config["controller"] = s.controller
        if name == plan.CANDIDATE:
            if s.candidate_checkout is None:
                raise ValueError("the candidate target needs --candidate DIR")
            return _gateway_url(config, s.candidate_checkout)
        return _gateway_url(config, s.gateway_checkout)

    def execute(self, run: plan.Run, capacity: float, fixed_limit: int) -> Outcome:
        s = self.setup
        cell = run.cell
        prompts = plan.requests_for(cell, capacity, s.max_num_seqs, s.duration_s)
        load: dict[str, Any]
        if cell.loop == "open":
            load = {"rate": cell.factor * capacity, "burstiness": cell.burstiness}
        else:
            load = {"concurrency": plan.concurrency_for(cell, s.max_num_seqs)}
        name = f"{_slug(cell.name)}-{run.target}-r{run.repetition}"
        with self.target(run.target, fixed_limit) as url:
            if run.target == "direct":
                summary = self.client(name, url, prompts, run.seed, **load)
            else:
                with StateTrace(url, s.out / "raw" / f"{name}.state.jsonl"):
                    summary = self.client(name, url, prompts, run.seed, **load)
        return Outcome(run, summary, prompts)


@contextmanager
def _gateway_url(config: dict[str, object], checkout: Path) -> Iterator[str]:
    with servers.start_gateway(config, checkout) as proc:
        yield proc.url


class StateTrace:
    """The gateway's limits and queues over a run: `/admin/state` every `every` seconds, one JSON
    line each (seconds since the start, then per backend its limit, in flight and last decision,
    per model its queue), so a run's verdict can be read beside what the controller did."""

    def __init__(self, base_url: str, path: Path, every: float = 0.5) -> None:
        self._url = f"{base_url}/admin/state"
        self._path = path
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> StateTrace:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        start = time.monotonic()
        with self._path.open("w") as out:
            while not self._stop.wait(self._every):
                try:
                    with urllib.request.urlopen(self._url, timeout=2) as answer:
                        state = json.load(answer)
                except (OSError, ValueError):
                    continue
                out.write(json.dumps({"t": round(time.monotonic() - start, 2), **_brief(state)}) + "\n")


def _brief(state: dict[str, Any]) -> dict[str, Any]:
    keep = ("limit", "inflight", "ceiling", "p90", "running", "waiting", "last_decision")
    backends = [{k: b.get(k) for k in keep} for b in state.get("backends", [])]
    models = {
        m: {k: q.get(k) for k in ("depth", "drain_rate", "wait_budget", "estimated_wait", "rejected")}
        for m, q in state.get("models", {}).items()
    }
    return {"backends": backends, "models": models}


def _slug(name: str) -> str:
    return name.replace(" ", "-").replace(".", "_")


def run_all(
    bench: Bench,
    runs: Sequence[plan.Run],
    capacity: float,
    fixed_limit: int,
    progress: Callable[[Outcome], None],
) -> list[Outcome]:
    outcomes = []
    for run in runs:
        outcome = bench.execute(run, capacity, fixed_limit)
        outcomes.append(outcome)
        progress(outcome)
        _save(bench.setup.out / "outcomes.jsonl", outcome)
    return outcomes


def _save(path: Path, outcome: Outcome) -> None:
    row = {"run": asdict(outcome.run), "summary": asdict(outcome.summary), "sent": outcome.requests_sent}
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def load_outcomes(path: Path) -> list[Outcome]:
    out = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        run = row["run"]
        cell = plan.Cell(**run.pop("cell"))
        out.append(Outcome(plan.Run(cell=cell, **run), records.Summary(**row["summary"]), row["sent"]))
    return out
