"""The limiter's hot path: nanoseconds per acquire + release, the work done once per request.

Three paths, each timed with `timeit` over `--number` pairs, `--repeat` times, interleaved (A B C A
B C ...) so drift on a shared machine lands on all of them; printed: median and spread (min-max).
- bare: acquire, release without a sample (a failed or cancelled request);
- sample: acquire, sent, release with a finished non-streaming sample (window + KV estimate);
- stream: acquire, sent with the stream's progress, first token, release with a streaming sample.

    python -m loadtests.bench_slots [--number 100000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from dataclasses import dataclass

from gateway.control.algorithms import create
from gateway.control.limiter import Limiter
from gateway.control.window import nearest_rank
from gateway.types import SLA, Sample


@dataclass
class _Progress:
    first_at: float | None = None
    last_at: float | None = None
    events: int = 0


def paths() -> dict[str, Callable[[], None]]:
    """One acquire + release per call, on a limiter with room (no wake-up callback)."""
    limiter = Limiter(create("fixed", {"limit": 64}, SLA()), clock=lambda: 100.0)
    finished = Sample(dispatched_at=100.0, e2e=1.0, output_tokens=100, prompt_tokens=200)
    streamed = Sample(dispatched_at=100.0, e2e=1.0, ttft=0.1, tpot=0.01, output_tokens=100)
    progress = _Progress(100.1, 100.9, 100)

    def bare() -> None:
        limiter.acquire().release(None)

    def sample() -> None:
        slot = limiter.acquire()
        slot.sent(100.0)
        slot.release(finished)

    def stream() -> None:
        slot = limiter.acquire()
        slot.sent(100.0, progress)
        slot.first_token(100.0, 0.1)
        slot.release(streamed)

    return {"bare": bare, "sample": sample, "stream": stream}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    runs = paths()
    ns: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeat):
        for name, fn in runs.items():
            ns[name].append(timeit.timeit(fn, number=args.number) / args.number * 1e9)
    print(f"{'path':<8} {'median ns':>10} {'min':>8} {'max':>8}   ({args.repeat} x {args.number} pairs)")
    for name, values in ns.items():
        values.sort()
        median = nearest_rank(values, 0.5)
        print(f"{name:<8} {median:>10.0f} {values[0]:>8.0f} {values[-1]:>8.0f}")


if __name__ == "__main__":
    main()
