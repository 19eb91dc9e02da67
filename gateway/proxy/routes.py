"""Routing: exact paths to handlers, with each route's methods, listener and key.

A dictionary lookup on the exact path: the gateway has a handful of fixed routes and the hot ones
should not pay for pattern matching. Then, in order:
- a route served on the other listener is 404 here: with `admin.port` set, `/metrics` and `/admin/*`
  exist only on the admin listener and the OpenAI API only on the public one (`/health` on both);
- a method the route does not take is 405 with `Allow`, on every route (GET routes take HEAD too);
- an admin route needs `Authorization: Bearer <admin key>` when one is configured (401 otherwise),
  compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum

from gateway.config.listen import AdminConfig
from gateway.proxy.errors import GatewayError
from gateway.proxy.tenants import bearer_token
from gateway.types import Receive, Scope, Send

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]
Respond = Callable[[Send, GatewayError, Scope], Awaitable[None]]


class Surface(Enum):
    PUBLIC = "public"
    """The OpenAI API: on the public listener only."""
    ADMIN = "admin"
    """/metrics and /admin/*: on the admin listener when there is one."""
    BOTH = "both"


@dataclass(frozen=True, slots=True)
class Route:
    handler: Handler
    methods: tuple[str, ...]
    surface: Surface = Surface.PUBLIC
    needs_key: bool = False

    @property
    def allow(self) -> bytes:
        return ", ".join(self.methods).encode()


def get(handler: Handler, surface: Surface = Surface.PUBLIC, *, needs_key: bool = False) -> Route:
    return Route(handler, ("GET", "HEAD"), surface, needs_key)


def post(handler: Handler, surface: Surface = Surface.PUBLIC, *, needs_key: bool = False) -> Route:
    return Route(handler, ("POST",), surface, needs_key)


class Router:
    def __init__(
        self,
        routes: dict[str, Route],
        admin: AdminConfig,
        respond: Respond,
        prefixed: dict[str, Route] | None = None,
    ) -> None:
        self._routes = routes
        self._prefixed = prefixed or {}
        """Routes for a path and everything below it (`/v1/files/{id}`), looked at only on a miss."""
        self._respond = respond
        self.admin = admin

    def _below(self, path: str) -> Route | None:
        for prefix, route in self._prefixed.items():
            if path == prefix or path.startswith(prefix + "/"):
                return route
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        route = self._routes.get(path) or self._below(path)
        if route is None or not self._here(route, scope):
            await self._respond(send, self._not_found(path), scope)
            return
        method: str = scope["method"]
        if method not in route.methods:
            allowed = route.allow.decode()
            err = GatewayError(
                405,
                f"{method} is not allowed on {path}; use {allowed}",
                "method_not_allowed",
                extra_headers=((b"allow", route.allow),),
            )
            await self._respond(send, err, scope)
            return
        if route.needs_key and not self._authorized(scope):
            await self._respond(
                send,
                GatewayError(
                    401, "this endpoint needs the admin key: 'Authorization: Bearer <key>'", "invalid_api_key"
                ),
                scope,
            )
            return
        await route.handler(scope, receive, send)

    def _not_found(self, path: str) -> GatewayError:
        """404; a path that exists under /v1 (an SDK `base_url` without it) says so."""
        if f"/v1{path}" in self._routes or self._below(f"/v1{path}") is not None:
            return GatewayError(
                404,
                f"no route for {path}; the OpenAI API is under /v1: POST /v1{path} "
                "(an OpenAI client's base_url ends in /v1)",
                "not_found",
            )
        return GatewayError(404, f"no route for {path}", "not_found")

    def _here(self, route: Route, scope: Scope) -> bool:
        port = self.admin.port
        if port is None or route.surface is Surface.BOTH:
            return True
        server = scope.get("server")
        on_admin = server is not None and server[1] == port
        return on_admin == (route.surface is Surface.ADMIN)

    def _authorized(self, scope: Scope) -> bool:
        key = self.admin.api_key
        if key is None:
            return True
        for name, value in scope["headers"]:
            if name == b"authorization":
                token = bearer_token(value)
                return token is not None and hmac.compare_digest(token, key.encode())
        return False
