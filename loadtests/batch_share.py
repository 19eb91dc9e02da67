"""What a batch beside interactive traffic costs that traffic, in the engine model's virtual time.

`--users` interactive clients and `k` batch lines share one simulated engine (the
`gemma3-4b-rtx4080` profile and the batch benchmark's requests of about 788 prompt and 308 output
tokens, both closed loops: a finished request is replaced at once). For each k, the interactive
completion tokens/s as a share of k = 0, the batch's, and vLLM's preemptions. No gateway, no wall
clock: this is the engine's own answer to how many batch lines fit beside the interactive ones,
which the gateway's bound on batch lines (gateway.pool.backends) is judged against; the wall-clock
benchmark (loadtests.bench_batch) adds the machine's noise to it.

    .venv/bin/python -m loadtests.batch_share --users 6 --batch 0 2 4 5 6 8
"""

from __future__ import annotations

import argparse
import random
import sys

from gateway.sim.engine import Engine
from gateway.sim.profiles import get_profile
from loadtests.batch_load import OUTPUT_TOKENS, PROMPT_TOKENS


def run(profile: str, users: int, lines: int, seconds: float) -> tuple[float, float, int]:
    """Interactive and batch completion tokens/s over `seconds` of virtual time, and preemptions."""
    p = get_profile(profile)
    engine = Engine(p, random.Random(4))
    blocks = PROMPT_TOKENS // p.block_size
    interactive: set[int] = set()
    sent = 0

    def send(is_interactive: bool, now: float) -> None:
        nonlocal sent
        sent += 1
        hashes = [hash((sent, j)) for j in range(blocks)]  # unique prompts: nothing shared
        seq = engine.add(PROMPT_TOKENS, hashes, now, max_tokens=OUTPUT_TOKENS, ignore_eos=True)
        if is_interactive:
            interactive.add(seq.uid)

    for i in range(users + lines):
        send(i < users, 0.0)
    now, tokens_i, tokens_b = 0.0, 0, 0
    while now < seconds:
        plan = engine.schedule(now)
        now += plan.duration
        report = engine.complete(plan, now)
        for seq in report.emitted:
            if seq.uid in interactive:
                tokens_i += 1
            else:
                tokens_b += 1
        for seq in report.finished:
            was_interactive = seq.uid in interactive
            interactive.discard(seq.uid)
            send(was_interactive, now)
    return tokens_i / now, tokens_b / now, engine.preemptions_total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="gemma3-4b-rtx4080")
    parser.add_argument("--users", type=int, default=6)
    parser.add_argument("--batch", type=int, nargs="*", default=[0, 2, 4, 5, 6, 8])
    parser.add_argument("--seconds", type=float, default=600.0, help="virtual seconds per point")
    args = parser.parse_args(argv)
    alone, _, _ = run(args.profile, args.users, 0, args.seconds)
    print(f"{args.users} interactive users, {PROMPT_TOKENS} + {OUTPUT_TOKENS} tokens, {args.profile}")
    print("completion tokens per second of the engine's (virtual) time")
    print("| batch lines | interactive tok/s | share of alone | batch tok/s | preemptions |")
    print("|---:|---:|---:|---:|---:|")
    for lines in args.batch:
        inter, batch, preempted = run(args.profile, args.users, lines, args.seconds)
        print(f"| {lines} | {inter:.0f} | {inter / alone:.3f} | {batch:.0f} | {preempted} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
