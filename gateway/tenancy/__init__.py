"""Tenants charged by what they cost: quotas at the door, usage kept per tenant and model.

- buckets.py: per-minute quotas as token buckets (pure arithmetic), `Limits`, `Verdict`;
- local.py: the quotas counted in one process; redis_quota.py: the same shared through Redis, one
  atomic script per decision; gate.py: which of the two decides, the local share while Redis is
  down, and each admitted request's `Hold`;
- headers.py: OpenAI's `x-ratelimit-*` headers; estimate.py: a prompt's tokens before the backend
  counts them;
- usage.py and usage_store.py: tokens and requests per tenant and model, as counters and per-minute
  rows in SQLite (`GET /admin/usage`).

Fair sharing of a model's queue by tokens is admission's (gateway.admission.fairness); the proxy
meters each request's tokens into both (gateway.proxy.metering).
"""
