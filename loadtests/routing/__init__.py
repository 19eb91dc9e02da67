"""The routing benchmark: workloads, a cheap streaming client, side-by-side runs, report.

Entry point: `python -m loadtests.bench_routing` (`make bench-routing`); results in `docs/benchmarks.md`.
"""
