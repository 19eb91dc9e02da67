"""Runs an ASGI app under uvicorn (uvloop, httptools) with graceful shutdown on SIGTERM/SIGINT.

On a signal uvicorn stops accepting, lets in-flight requests (streams included) finish for up to
`grace` seconds, then closes what is left and runs the app's lifespan shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import socket

import uvicorn
from starlette.types import ASGIApp

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def uvicorn_config(
    app: ASGIApp, host: str, port: int, *, grace: float, log_level: str = "info"
) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=max(1, round(grace)),
        timeout_keep_alive=75,
        server_header=False,
        date_header=False,
        backlog=4096,
    )


async def serve(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    grace: float,
    log_level: str = "info",
    sockets: list[socket.socket] | None = None,
) -> None:
    """Serve until a signal; on `sockets` when given (already bound), else on (host, port)."""
    server = uvicorn.Server(uvicorn_config(app, host, port, grace=grace, log_level=log_level))
    await server.serve(sockets=sockets)


def run(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    grace: float,
    log_level: str = "info",
    sockets: list[socket.socket] | None = None,
) -> None:
    logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT)
    try:
        import uvloop

        uvloop.run(serve(app, host, port, grace=grace, log_level=log_level, sockets=sockets))
    except ImportError:
        asyncio.run(serve(app, host, port, grace=grace, log_level=log_level, sockets=sockets))
