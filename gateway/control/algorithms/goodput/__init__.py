"""The `goodput` controller: a small model of the engine, the evidence it stands on, one decision."""
