"""The concurrency limit of each backend, and how it is chosen.

`limiter` runs one backend's control tick: it shows the algorithm what happened and applies the limit
it returns. Its parts do not import each other: `slots` (the count in flight and each request's
hold), `evidence` (latency samples, first tokens and streams in flight), `ceiling` (how many
sequences the KV cache holds) and `counters` (the engine's preemption counter between ticks).
`window` keeps latency samples; `algorithms/` holds the limit algorithms, pure and selectable by name.
"""
