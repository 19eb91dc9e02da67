"""The backends: their health, their vLLM metrics, and which one takes a request."""
