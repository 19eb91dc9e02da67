"""Scenario benchmark of the gateway: load generator, scenarios, runner, analysis and report.

Entry point: `python -m loadtests.bench_scenarios` (`make bench-scenarios`); current results in
`docs/benchmarks.md`.
"""
