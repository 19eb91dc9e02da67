"""The `sla` limit algorithm: the most output tokens/s while every P90 stays under target."""
