"""The wait a server advises with a refusal, as the OpenAI SDK reads it.

`retry-after-ms` (OpenAI's own header, milliseconds) wins over `Retry-After` (seconds, RFC 9110);
a value that is not a number is skipped in favour of the other header. A `Retry-After` that is an
HTTP date is still a deliberate "come back later" and counts as one second. Negative values count
as zero. No header: None, and the client falls back to its own backoff.
"""

from __future__ import annotations

from collections.abc import Mapping


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The server's advised wait in seconds; None if it advised none."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    seconds = headers.get("retry-after")
    if seconds is None:
        return None
    try:
        return max(0.0, float(seconds))
    except ValueError:
        return 1.0
