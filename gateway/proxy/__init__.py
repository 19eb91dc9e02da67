"""The OpenAI surface: requests read and checked, forwarded to a backend, answered."""
