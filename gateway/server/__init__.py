"""How the gateway is served: listeners and their limits, the acceptor, probes, worker processes."""
