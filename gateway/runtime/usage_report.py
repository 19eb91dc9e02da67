"""`GET /admin/usage?start=&end=`: tokens and requests per tenant and model over a time range.

`start` and `end` are Unix seconds or ISO 8601 times (UTC unless the time says otherwise); `end`
defaults to now and `start` to 24 hours before `end`. Usage is kept per minute, so the range is
widened to whole minutes: every minute that overlaps [start, end) counts. A bad value is a 400 in
OpenAI's error shape.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from urllib.parse import parse_qs

from gateway.tenancy.usage import UsageLedger

DAY = 86400.0


async def usage_report(ledger: UsageLedger, query: bytes) -> tuple[int, dict[str, object]]:
    params = parse_qs(query.decode("latin-1"))
    try:
        end = _instant(params, "end", time.time())
        start = _instant(params, "start", end - DAY)
    except ValueError as exc:
        return 400, _error(str(exc), "start" if "start" in str(exc) else "end")
    if start >= end:
        return 400, _error(f"start ({start:g}) must be before end ({end:g})", "start")
    rows = await ledger.totals(start, end)
    data = [
        {
            "tenant": r.tenant,
            "model": r.model,
            "requests": r.requests,
            "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens,
            "total_tokens": r.prompt_tokens + r.output_tokens,
        }
        for r in rows
    ]
    return 200, {
        "object": "list",
        "start": start,
        "end": end,
        "persistent": ledger.store.persistent,
        "data": data,
    }


def _instant(params: dict[str, list[str]], key: str, default: float) -> float:
    values = params.get(key)
    if not values or not values[-1]:
        return default
    text = values[-1]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{key}: must be Unix seconds or an ISO 8601 time, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _error(message: str, param: str) -> dict[str, object]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": "invalid_usage_range",
        }
    }
