"""Calibrate a simulator profile (`tiny-cpu-4l` by default) against the real vLLM engine on this CPU.

The same closed-loop workload runs against both, side by side: N streaming clients, each
with a distinct 232-token prompt (random digits: one token per digit for the tiny engine's
byte-level tokenizer and for the simulator's one-byte-per-token profile) and 300 generated
tokens (ignore_eos), for each N. Runs alternate engine, simulator, engine, ... so drift in
the machine's other load falls on both. Printed per N: token throughput in the steady
window (tokens from each response's `usage`), client TTFT P90, the engine's own TTFT and
inter-token P90 (histogram deltas over the window), preemptions and peak waiting requests
from the server's `/metrics`.

usage: python -m loadtests.bench_vllm_calibration [--clients 1,8,16,20,24,32] [--duration 20]
       [--engine-url URL] [--sim-url URL] [--json PATH] [--hidden-size 768 --layers 4]
       python -m loadtests.bench_vllm_calibration --limits 40 [--fixed 8,16,24,32]

With --limits N it instead runs the overload scenario on the real engine: N clients straight
to the engine, then through `llm-gateway serve` with each fixed limit, then with the adaptive
`sla` controller (TTFT P90 target --sla seconds), and prints one row per mode.

Without --engine-url it starts the engine from VLLM_VENV (scripts/vllm_cpu/install.sh);
without --sim-url it starts `llm-gateway sim --profile PROFILE`; both on loopback, both
stopped by process id at the end. The CPU is shared: expect run-to-run noise of 10-20% in
throughput, more in the tails.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loadtests import closed_loop
from loadtests.vllm_engine import engine_server, served_model
from tests.procs import spawn_gateway, spawn_sim

COLUMNS = (
    ("clients", "N", "{:>3}"),
    ("tok_per_s", "tok/s", "{:>7.1f}"),
    ("ttft_p90_s", "TTFT90", "{:>7.3f}"),
    ("engine_ttft_p90_s", "eTTFT90", "{:>7.3f}"),
    ("engine_itl_p90_s", "eITL90", "{:>7.4f}"),
    ("tpot_p90_s", "TPOT90", "{:>7.4f}"),
    ("preemptions", "preempt", "{:>7.0f}"),
    ("peak_waiting", "waitMax", "{:>7.0f}"),
    ("peak_kv", "kvMax", "{:>6.2f}"),
)

LIMIT_COLUMNS = (
    ("tok_per_s", "tok/s", "{:>7.1f}"),
    ("ttft_p90_s", "TTFT90", "{:>7.2f}"),
    ("engine_ttft_p90_s", "eTTFT90", "{:>7.3f}"),
    ("engine_itl_p90_s", "eITL90", "{:>7.4f}"),
    ("preemptions", "preempt", "{:>7.0f}"),
    ("mean_waiting", "waitAvg", "{:>7.2f}"),
    ("peak_waiting", "waitMax", "{:>7.0f}"),
    ("failures", "failed", "{:>7}"),
)


@contextmanager
def sim_server(given: str | None, profile: str) -> Iterator[str]:
    if given:
        yield given.rstrip("/")
        return
    with spawn_sim("--profile", profile, timeout=60) as sim:
        yield sim.url


def gateway_config(engine_url: str, algorithm: str, limit: int | None, sla: float) -> dict[str, object]:
    return {
        "backends": [engine_url],
        "sla": {"ttft_p90": sla},
        "controller": {"algorithm": algorithm, "params": {} if limit is None else {"limit": limit}},
        "queue": {"max_depth": 1024, "timeout": 600},
    }


def compare_limits(engine_url: str, args: argparse.Namespace) -> list[dict[str, float | str]]:
    """Direct, fixed limits and adaptive, one after another, on the same engine."""
    model = served_model(engine_url)
    workload = closed_loop.Workload(
        clients=args.limits, duration_s=args.duration, warmup_s=args.warmup, model=model
    )
    modes: list[tuple[str, str, int | None]] = [("direct", "", None)]
    modes += [(f"fixed-{n}", "fixed", int(n)) for n in args.fixed.split(",")]
    modes.append(("sla", "sla", None))
    rows: list[dict[str, float | str]] = []
    for name, algorithm, limit in modes:
        if not algorithm:
            result = closed_loop.run_sync(engine_url, workload, engine_url=engine_url)
        else:
            with spawn_gateway(gateway_config(engine_url, algorithm, limit, args.sla), timeout=60) as gw:
                result = closed_loop.run_sync(gw.url, workload, engine_url=engine_url)
        row = closed_loop.summary(name, result)
        rows.append(row)
        print(table([row], LIMIT_COLUMNS).splitlines()[-1], flush=True)
    return rows


def table(rows: list[dict[str, float | str]], columns: tuple[tuple[str, str, str], ...] = COLUMNS) -> str:
    header = "target   " + " ".join(f"{title:>7}" for _, title, _ in columns)
    lines = [header]
    for row in rows:
        cells = " ".join(fmt.format(row[key]) for key, _, fmt in columns)
        lines.append(f"{row['target']:<8} {cells}")
    return "\n".join(lines)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(1)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,8,16,20,24,32")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=4.0)
    parser.add_argument("--engine-url")
    parser.add_argument("--sim-url")
    parser.add_argument(
        "--profile", default="tiny-cpu-4l", help="simulator profile (tiny-cpu-4l: the default model)"
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--hidden-size", type=int, default=768, help="of the engine's tiny model")
    parser.add_argument("--layers", type=int, default=4, help="of the engine's tiny model")
    parser.add_argument("--limits", type=int, metavar="N", help="compare direct/fixed/sla at N clients")
    parser.add_argument("--fixed", default="8,16,24,32", help="fixed limits for --limits")
    parser.add_argument("--sla", type=float, default=1.0, help="TTFT P90 target for --limits")
    args = parser.parse_args(argv)
    levels = [int(n) for n in args.clients.split(",")]

    # Stop the servers this script started on SIGTERM too, not only on Ctrl-C.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if args.limits:
        with engine_server(args.engine_url, args.hidden_size, args.layers) as engine_url:
            rows = compare_limits(engine_url, args)
        print()
        print(table(rows, LIMIT_COLUMNS))
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2) + "\n")
        return 0

    rows = []
    with (
        engine_server(args.engine_url, args.hidden_size, args.layers) as engine_url,
        sim_server(args.sim_url, args.profile) as sim_url,
    ):
        for clients in levels:
            for name, url in (("engine", engine_url), ("sim", sim_url)):
                workload = closed_loop.Workload(
                    clients=clients,
                    duration_s=args.duration,
                    warmup_s=args.warmup,
                    model=served_model(url),
                )
                result = closed_loop.run_sync(url, workload, engine_url=url)
                row = closed_loop.summary(name, result)
                rows.append(row)
                print(table([row]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
