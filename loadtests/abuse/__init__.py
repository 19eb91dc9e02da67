"""The abuse benchmark's parts: what an attack does (`attacks`), and what is watched while it runs
(`watch`). Entry point: `loadtests/bench_abuse.py` (`make bench-abuse`)."""
