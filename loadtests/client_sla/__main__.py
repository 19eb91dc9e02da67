"""The client-side SLA benchmark with vLLM's own client: direct, a fixed limit and the gateway.

usage: python -m loadtests.client_sla [--engine real|sim] [--profile tiny-cpu-4l] [--engine-url URL]
       [--duration 60] [--repeat 3] [--factors 0.5,0.9,1.5,3] [--burstiness 1,0.25] [--loops open,closed]
       [--input-len 200] [--output-len 120] [--ttft-ms 1500] [--tpot-ms 150] [--capacity RPS]
       [--fixed-limit N] [--sweep 0.125,0.25,0.5,0.75,1] [--controller JSON] [--gateway-checkout DIR]
       [--candidate DIR] [--out DIR] [--rejudge]

First the engine's capacity (closed loop at `max_num_seqs`, requests/s) and the fixed limit (the best
closed-loop goodput of a few concurrencies, straight at the engine), unless given; then every cell
(loadtests.client_sla.plan) with direct, fixed and gateway interleaved, repeated; then the tables
(loadtests.client_sla.report), printed and written to DIR/report.md. The client is `vllm bench serve`
(loadtests.client_sla.client) from VLLM_VENV; `--engine real` starts the CPU engine of
scripts/vllm_cpu/engine.py niced (unless `--engine-url`); `--engine sim` starts `llm-gateway sim`
with `--profile`, counting prompt tokens at the bytes per token the client's tokenizer makes.
`--gateway-checkout` runs the gateway from another worktree (with its own .venv); `--candidate DIR`
adds DIR's gateway as a fourth target, interleaved with the others, to compare a change before and
after in the same minutes. `--rejudge`
writes the tables again from DIR's outcomes without running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gateway.sim.profiles import get_profile
from loadtests.client_sla import plan, report, run, servers
from loadtests.client_sla.worker import Worker
from tests.procs import ROOT
from tests.vllm.real_engine import load_script

REAL_MAX_NUM_SEQS = 32
"""scripts/vllm_cpu/engine.py's default."""


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=("real", "sim"), default="sim")
    p.add_argument("--profile", default="tiny-cpu-4l", help="simulator profile (--engine sim)")
    p.add_argument("--engine-url", help="a running engine (--engine real)")
    p.add_argument("--engine-nice", type=int, default=10)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals per run")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--factors", default="0.5,0.9,1.5,3")
    p.add_argument("--burstiness", default="1,0.25")
    p.add_argument("--loops", default="open,closed")
    p.add_argument("--targets", default=",".join(plan.TARGETS))
    p.add_argument("--input-len", type=int, default=200)
    p.add_argument("--output-len", type=int, default=120)
    p.add_argument("--ttft-ms", type=float, default=1500.0)
    p.add_argument("--tpot-ms", type=float, default=150.0)
    p.add_argument("--capacity", type=float, help="requests/s; skips the capacity run")
    p.add_argument(
        "--capacity-rounds", type=int, default=8, help="capacity run: max_num_seqs x this many requests"
    )
    p.add_argument("--fixed-limit", type=int, help="skips the sweep")
    p.add_argument("--sweep", default="0.125,0.25,0.5,0.75,1", help="fractions of max_num_seqs")
    p.add_argument(
        "--controller",
        type=json.loads,
        default={},
        help='JSON merged into the gateway\'s `controller` config, e.g. \'{"algorithm": "goodput"}\'',
    )
    p.add_argument("--gateway-checkout", type=Path, default=ROOT)
    p.add_argument("--candidate", type=Path, help="another checkout's gateway, run as the target `candidate`")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "client-sla")
    p.add_argument("--rejudge", action="store_true")
    return p.parse_args(argv)


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _tokenizer_dir() -> Path:
    """The tiny model directory loadtests.vllm_engine serves (written now if absent)."""
    engine = load_script("engine")
    venv = Path(os.environ.get("VLLM_VENV", str(engine.CACHE / "vllm-venv")))
    settings = engine.EngineSettings(venv=venv, model_dir=engine.CACHE / "tiny-llama-768x4")
    if not (settings.model_dir / "tokenizer.json").exists():
        engine.write_model(settings)
    return Path(settings.model_dir)


def _vllm_python() -> Path:
    engine = load_script("engine")
    return Path(os.environ.get("VLLM_VENV", str(engine.CACHE / "vllm-venv"))) / "bin" / "python"


@contextmanager
def engine_for(args: argparse.Namespace, worker: Worker, tokenizer: Path) -> Iterator[tuple[str, str, int]]:
    """(base URL, served model, max_num_seqs) of the engine the runs measure."""
    if args.engine == "real":
        with servers.real_engine(args.engine_url, args.engine_nice) as url:
            yield url, "tiny-llama", REAL_MAX_NUM_SEQS
        return
    profile = get_profile(args.profile)
    workload = plan.Workload(args.input_len, args.output_len, args.ttft_ms, args.tpot_ms)
    probe = plan.client_args("http://127.0.0.1:1", "tiny-llama", str(tokenizer), workload, 200, 0)
    measured = worker.ask({"argv": probe, "bytes_per_token": True})
    print(
        f"client prompts: {measured['prompt_tokens']:.0f} tokens, "
        f"{measured['bytes_per_token']:.2f} bytes/token"
    )
    with servers.simulator(args.profile, "tiny-llama", measured["bytes_per_token"]) as url:
        yield url, "tiny-llama", profile.max_num_seqs


def measure(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "outcomes.jsonl").unlink(missing_ok=True)
    tokenizer = _tokenizer_dir()
    workload = plan.Workload(args.input_len, args.output_len, args.ttft_ms, args.tpot_ms)
    with (
        Worker(_vllm_python(), args.out / "client.log") as worker,
        engine_for(args, worker, tokenizer) as engine,
    ):
        url, model, max_num_seqs = engine
        setup = run.Setup(url, model, str(tokenizer), max_num_seqs, workload, args.duration, args.out,
                          args.gateway_checkout, args.candidate, args.controller)  # fmt: skip
        bench = run.Bench(setup, worker)
        capacity = args.capacity or bench.capacity(args.capacity_rounds)
        print(f"capacity: {capacity:.2f} req/s (closed loop, {max_num_seqs} clients)", flush=True)
        limit = args.fixed_limit
        if limit is None:
            limit, goodputs = bench.sweep(capacity, _floats(args.sweep))
            print(f"fixed limit {limit}: closed-loop goodput by concurrency {goodputs}", flush=True)
        meta = {
            "capacity": capacity,
            "fixed_limit": limit,
            "args": {k: str(v) for k, v in vars(args).items()},
        }
        (args.out / "meta.json").write_text(json.dumps(meta, indent=1))
        cells = plan.cells(_floats(args.factors), _floats(args.burstiness), args.loops.split(","))
        targets = args.targets.split(",")
        if args.candidate and plan.CANDIDATE not in targets:
            targets.append(plan.CANDIDATE)
        runs = plan.schedule(cells, args.repeat, targets)
        run.run_all(bench, runs, capacity, limit, _progress)
    return rejudge(args)


def _progress(o: run.Outcome) -> None:
    s = o.summary
    print(
        f"{o.run.cell.name:>20} {o.run.target:>7} r{o.run.repetition}: goodput {s.goodput:.2f} "
        f"completed {s.completed}/{s.requests} refused {s.refused} failed {s.failed} "
        f"TTFT P90 {s.ttft_p90_ms / 1000:.2f} s TPOT P90 {s.tpot_p90_ms:.0f} ms "
        f"no-RA {s.refused_without_retry_after} late {s.served_late} resent {s.resent}",
        flush=True,
    )


def rejudge(args: argparse.Namespace) -> int:
    meta = json.loads((args.out / "meta.json").read_text())
    outcomes = run.load_outcomes(args.out / "outcomes.jsonl")
    verdicts = report.verdicts_for(outcomes, meta["capacity"], args.ttft_ms)
    text = (
        f"capacity {meta['capacity']:.2f} req/s; fixed limit {meta['fixed_limit']}\n\n"
        f"{report.runs_table(outcomes)}\n\n{report.verdict_table(verdicts)}\n"
    )
    (args.out / "report.md").write_text(text)
    print(text)
    return 0


def main(argv: list[str]) -> int:
    args = parse(argv)
    return rejudge(args) if args.rejudge else measure(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
