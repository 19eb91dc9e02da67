"""Which tenant a request belongs to, from its API key (`Authorization: Bearer <key>`).

Without configured tenants every request is tenant `default` and no key is needed; with tenants,
a request needs a key one of them holds, or it is refused with 401 as OpenAI refuses a bad key.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.config import TenantConfig
from gateway.proxy.errors import GatewayError

DEFAULT_TENANT = "default"


def bearer_token(auth: bytes | None) -> bytes | None:
    """The key in an `Authorization: Bearer <key>` header value (scheme case-insensitive), else None."""
    return auth[7:] if auth and auth[:7].lower() == b"bearer " else None


class TenantKeys:
    """The configured tenants by API key: the one table every route (inference, files, batches)
    authenticates against. A reload replaces its contents in place (`update`), so no route can
    keep a key that a reload took away, or stay open once tenants are configured."""

    def __init__(self, tenants: Iterable[TenantConfig]) -> None:
        self._by_key: dict[str, TenantConfig] = {}
        self.update(tenants)

    def update(self, tenants: Iterable[TenantConfig]) -> None:
        self._by_key = {key: t for t in tenants for key in t.api_keys}

    def tenant_of(self, auth: bytes | None) -> str:
        """The tenant holding the bearer key in `auth` (an Authorization header value), or a 401."""
        return _tenant_of(self._by_key, auth)


def _tenant_of(tenants: dict[str, TenantConfig], auth: bytes | None) -> str:
    if not tenants:
        return DEFAULT_TENANT
    token = bearer_token(auth)
    key = token.decode("latin-1") if token else None
    tenant = tenants.get(key) if key else None
    if tenant is None:
        raise GatewayError(
            401,
            "Incorrect API key provided."
            if key
            else "Missing API key: send it as 'Authorization: Bearer <key>'.",
            "invalid_api_key",
        )
    return tenant.name
