"""Which tenant a request belongs to, from its API key (`Authorization: Bearer <key>`).

Without configured tenants every request is tenant `default` and no key is needed; with tenants,
a request needs a key one of them holds, or it is refused with 401 as OpenAI refuses a bad key.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config import TenantConfig
from gateway.proxy.errors import GatewayError

DEFAULT_TENANT = "default"


def bearer_token(auth: bytes | None) -> bytes | None:
    """The key in an `Authorization: Bearer <key>` header value (scheme case-insensitive), else None."""
    return auth[7:] if auth and auth[:7].lower() == b"bearer " else None


def tenant_of(tenants: Mapping[str, TenantConfig], auth: bytes | None) -> str:
    """The tenant holding the bearer key in `auth` (an Authorization header value), or a 401."""
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
