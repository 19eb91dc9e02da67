"""Taking one lease from a pool by hand, as admission does for the request at the head of a queue."""

from __future__ import annotations

from collections.abc import Collection

from gateway.pool.backends import Lease
from gateway.pool.pool import Pool
from gateway.routing import RouteKey


def take(
    pool: Pool,
    model: str,
    route: RouteKey | None = None,
    exclude: Collection[str] = (),
    *,
    background: bool = False,
) -> Lease | None:
    """A lease on the backend the pool picks for one request, or None when none has room."""
    got = pool.pick(model, (route,), exclude=exclude, background=background)
    return None if got is None else got[1]
