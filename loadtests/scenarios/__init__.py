"""Scenario benchmark of the gateway: load generator, scenarios, runner, analysis and report.

Entry point: `loadtests/bench_scenarios.py` (`make bench-scenarios`); results in `docs/benchmarks.md`.
"""
