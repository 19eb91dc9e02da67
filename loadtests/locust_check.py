"""Pass/fail gate over the statistics CSV a Locust run wrote with ``--csv PREFIX``.

    python -m loadtests.locust_check results/loadtest --max-fail-rate 0.01 --max-ttft-p90 2.0

Reads ``PREFIX_stats.csv`` (or the CSV file given) and exits 1 when a threshold is passed, 2 when the
file is missing or holds no requests, 0 otherwise. The numbers:

- failure rate = failures / (requests + shed answers), over every request row (the custom metric rows
  TTFT, TPOT and tokens_per_s are measurements, not requests, and SHED rows are deliberate refusals);
- P90 TTFT = the largest "90%" of the TTFT rows (one per streaming endpoint), in seconds;
- shed rate = shed answers / (requests + shed answers), checked only when ``--max-shed-rate`` is given.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

METRIC_TYPES = frozenset({"TTFT", "TPOT", "tokens_per_s"})
SHED_TYPE = "SHED"


@dataclass(frozen=True, slots=True)
class Summary:
    requests: int
    failures: int
    shed: int
    ttft_p90: float | None
    """Seconds; None when the run had no streaming request that produced a token."""
    ttft_count: int

    @property
    def answered(self) -> int:
        return self.requests + self.shed

    @property
    def failure_rate(self) -> float:
        return self.failures / self.answered if self.answered else 0.0

    @property
    def shed_rate(self) -> float:
        return self.shed / self.answered if self.answered else 0.0


def stats_path(prefix_or_file: str) -> Path:
    path = Path(prefix_or_file)
    return path if path.suffix == ".csv" else Path(f"{prefix_or_file}_stats.csv")


def summarize(path: Path) -> Summary:
    requests = failures = shed = ttft_count = 0
    ttft_p90: float | None = None
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            kind, name = row.get("Type") or "", row.get("Name") or ""
            if not kind and name == "Aggregated":
                continue
            count, failed = int(row["Request Count"]), int(row["Failure Count"])
            if kind == SHED_TYPE:
                shed += count
            elif kind == "TTFT":
                ttft_count += count
                if count and row.get("90%") not in (None, "", "N/A"):
                    p90 = float(row["90%"]) / 1000
                    ttft_p90 = p90 if ttft_p90 is None else max(ttft_p90, p90)
            elif kind not in METRIC_TYPES:
                requests += count
                failures += failed
    return Summary(requests, failures, shed, ttft_p90, ttft_count)


def violations(
    summary: Summary,
    max_fail_rate: float | None = None,
    max_ttft_p90: float | None = None,
    max_shed_rate: float | None = None,
) -> list[str]:
    """One line per threshold passed; empty when the run is within all of them."""
    problems = []
    if max_fail_rate is not None and summary.failure_rate > max_fail_rate:
        problems.append(
            f"failure rate {summary.failure_rate:.4f} > {max_fail_rate:g} "
            f"({summary.failures} of {summary.answered})"
        )
    if max_ttft_p90 is not None:
        if summary.ttft_p90 is None:
            problems.append("P90 TTFT unknown: no streaming request produced a token")
        elif summary.ttft_p90 > max_ttft_p90:
            problems.append(f"P90 TTFT {summary.ttft_p90:.3f} s > {max_ttft_p90:g} s")
    if max_shed_rate is not None and summary.shed_rate > max_shed_rate:
        problems.append(
            f"shed rate {summary.shed_rate:.4f} > {max_shed_rate:g} ({summary.shed} of {summary.answered})"
        )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="the --csv PREFIX of the run, or its _stats.csv file")
    parser.add_argument("--max-fail-rate", type=float, default=None, help="e.g. 0.01")
    parser.add_argument("--max-ttft-p90", type=float, default=None, help="seconds")
    parser.add_argument("--max-shed-rate", type=float, default=None, help="e.g. 0.05")
    args = parser.parse_args(argv)
    path = stats_path(args.csv)
    try:
        summary = summarize(path)
    except (OSError, KeyError, ValueError) as exc:
        print(f"locust_check: cannot read {path}: {exc!r}", file=sys.stderr)
        return 2
    ttft = "n/a" if summary.ttft_p90 is None else f"{summary.ttft_p90:.3f} s"
    print(
        f"locust_check: {path}: {summary.requests} requests, {summary.failures} failed "
        f"({summary.failure_rate:.2%}), {summary.shed} shed ({summary.shed_rate:.2%}), "
        f"P90 TTFT {ttft} over {summary.ttft_count} streams"
    )
    if summary.answered == 0:
        print("locust_check: FAIL: the run made no requests", file=sys.stderr)
        return 2
    problems = violations(summary, args.max_fail_rate, args.max_ttft_p90, args.max_shed_rate)
    for problem in problems:
        print(f"locust_check: FAIL: {problem}", file=sys.stderr)
    if not problems:
        print("locust_check: PASS")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
