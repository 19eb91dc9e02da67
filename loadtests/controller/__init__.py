"""The controller evaluation: one matrix of workloads and SLA settings, run on the simulator and on vLLM."""
