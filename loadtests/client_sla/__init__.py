"""The client-side SLA benchmark: vLLM's own `vllm bench serve` against the engine, a fixed limit and
the gateway, open and closed loop, judged by what the client saw (`python -m loadtests.client_sla`)."""
