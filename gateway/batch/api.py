"""HTTP routes of the Files and Batches API, as the OpenAI SDK calls them.

    POST   /v1/files                  multipart upload (purpose=batch)      -> file
    GET    /v1/files                  ?purpose&after&limit&order            -> list of files
    GET    /v1/files/{id}                                                   -> file
    DELETE /v1/files/{id}                                                   -> {"id", "object", "deleted"}
    GET    /v1/files/{id}/content                                           -> the file's bytes
    POST   /v1/batches                {input_file_id, endpoint, completion_window, metadata}
    GET    /v1/batches                ?after&limit                          -> list of batches
    GET    /v1/batches/{id}                                                 -> batch
    POST   /v1/batches/{id}/cancel                                          -> batch

Every call is a tenant's (by its API key, as for the inference routes) and sees only that tenant's
objects: another tenant's id is answered 404, as an id that does not exist. Lists page with the
cursor `after` (the last id of the previous page) and say `has_more`, which the SDK's cursor pages
follow. With no `batch.data_dir` configured, these routes answer 404 saying how to turn them on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs

from gateway.batch.model import BatchRecord, FileRecord
from gateway.batch.service import BatchService
from gateway.proxy.asgi import read_body, respond_error, send_json
from gateway.proxy.errors import GatewayError, excerpt
from gateway.proxy.request import json_object
from gateway.proxy.tenants import TenantKeys
from gateway.types import Receive, Scope, Send

PREFIXES = ("/v1/files", "/v1/batches")
"""The router sends these paths and every path below them here."""
METHODS = ("GET", "HEAD", "POST", "DELETE")
CREATE_BODY_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class _Call:
    tenant: str
    method: str
    parts: Sequence[str]
    """The path after /v1: ["files"], ["files", id], ["files", id, "content"], ..."""
    query: dict[str, str]
    scope: Scope
    receive: Receive
    send: Send

    def route(self, n: int, method: str, tail: str = "") -> bool:
        return len(self.parts) == n and self.method == method and (n < 3 or self.parts[2] == tail)


class BatchRoutes:
    def __init__(self, service: BatchService | None, tenants: TenantKeys) -> None:
        self._service = service
        self._tenants = tenants

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if self._service is None:
                raise GatewayError(
                    404,
                    "the Files and Batches API is off: set batch.data_dir in the config",
                    "batch_api_disabled",
                )
            auth = next((v for k, v in scope["headers"] if k == b"authorization"), None)
            raw_query = scope.get("query_string", b"").decode("utf-8", "replace")
            query = {k: v[-1] for k, v in parse_qs(raw_query).items()}
            parts = scope["path"].strip("/").split("/")[1:]
            call = _Call(self._tenants.tenant_of(auth), scope["method"], parts, query, scope, receive, send)
            route = self._files if parts[0] == "files" else self._batches
            await route(self._service, call)
        except GatewayError as err:
            await respond_error(send, err, scope)

    @staticmethod
    async def _files(service: BatchService, c: _Call) -> None:
        files, tenant = service.files, c.tenant
        if c.route(1, "POST"):
            await send_json(c.send, 200, (await files.upload(tenant, c.scope, c.receive)).to_openai())
        elif c.route(1, "GET"):
            order = c.query.get("order", "desc")
            if order not in ("asc", "desc"):
                raise GatewayError(400, "order must be 'asc' or 'desc'", "invalid_order", "order")
            after, purpose = c.query.get("after"), c.query.get("purpose")
            page = await files.list(tenant, purpose, after, _limit(c.query, 10_000), order == "asc")
            await send_json(c.send, 200, _page(*page))
        elif c.route(2, "GET"):
            await send_json(c.send, 200, (await files.get(tenant, c.parts[1])).to_openai())
        elif c.route(2, "DELETE"):
            await files.delete(tenant, c.parts[1])
            await send_json(c.send, 200, {"id": c.parts[1], "object": "file", "deleted": True})
        elif c.route(3, "GET", "content"):
            await files.send_content(tenant, c.parts[1], c.send)
        else:
            raise _no_route(c)

    @staticmethod
    async def _batches(service: BatchService, c: _Call) -> None:
        if c.route(1, "POST"):
            payload = json_object(await read_body(c.receive, CREATE_BODY_LIMIT))
            await send_json(c.send, 200, (await service.create(c.tenant, payload)).to_openai())
        elif c.route(1, "GET"):
            page = await service.list(c.tenant, c.query.get("after"), _limit(c.query, 20, 100))
            await send_json(c.send, 200, _page(*page))
        elif c.route(2, "GET"):
            await send_json(c.send, 200, (await service.get(c.tenant, c.parts[1])).to_openai())
        elif c.route(3, "POST", "cancel"):
            await send_json(c.send, 200, (await service.cancel(c.tenant, c.parts[1])).to_openai())
        else:
            raise _no_route(c)


def _limit(query: dict[str, str], default: int, most: int = 10_000) -> int:
    """`limit` from the query: ASCII digits, from 1 to `most` (OpenAI's bounds: 10,000 files and
    100 batches per page), else a 400."""
    text = query.get("limit", str(default))
    if not (text.isascii() and text.isdigit() and len(text) <= 6 and 1 <= int(text) <= most):
        raise GatewayError(400, f"limit must be an integer from 1 to {most}", "invalid_limit", "limit")
    return int(text)


def _page(items: Sequence[FileRecord | BatchRecord], has_more: bool) -> dict[str, object]:
    return {
        "object": "list",
        "data": [item.to_openai() for item in items],
        "first_id": items[0].id if items else None,
        "last_id": items[-1].id if items else None,
        "has_more": has_more,
    }


def _no_route(c: _Call) -> GatewayError:
    return GatewayError(404, f"no route for {c.method} {excerpt(c.scope['path'])}", "not_found")
