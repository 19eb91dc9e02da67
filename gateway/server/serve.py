"""Runs the gateway under uvicorn (uvloop, httptools): listeners, limits, signals, shutdown.

- Descriptors. The soft RLIMIT_NOFILE is raised to the hard limit at start, and the connection cap
  is lowered if the descriptors cannot hold it: each client connection may need a second descriptor
  upstream, so at most (limit - RESERVED_FDS) / 2 connections, and `accept` never fails for lack of
  descriptors.
- Accepting. Connections are accepted a few per turn of the event loop (gateway/server/acceptor.py), not
  all pending ones at once as the loop's own server does, so a burst cannot stall running requests;
  one that has sent nothing is held unread (counted under the cap) until it does.
- Collector. Once the application has started, its full passes are spaced out (gateway/server/gc_pacing.py).
- Listeners. The public one, and with `admin.port` a second one for /metrics and /admin/*; both
  run the same application (which routes by listener) under one server and one lifespan, each
  under a connection cap of its own (the admin one ADMIN_CONNECTIONS), so a flood of the public
  port cannot lock operators out. With
  `admin.probe_port` a third, answered from a thread (gateway/server/probes.py) from the start of
  the application to the end of the shutdown. Under `--workers` the supervisor binds the public
  socket and each worker binds the others with SO_REUSEPORT, as the public one is.
- Signals. SIGHUP reloads the config. SIGTERM or SIGINT starts the shutdown; a second one ends the
  grace at once. The process then exits 0: a shutdown asked for is not a failure.
- Shutdown. At once: stop accepting, answer every queued request 503 (and any new one on a kept-
  alive connection), close idle connections. Running requests get `shutdown_grace` to finish; then
  the application ends what is left (streams get an in-band error), and after END_MARGIN more any
  connection still open (a client not reading) is aborted, so the lifespan shutdown always runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import resource
import signal
import socket
from collections.abc import Generator, Mapping
from typing import Any, Protocol

import uvicorn
from uvicorn.config import STARTUP_FAILURE

from gateway.config import GatewayConfig
from gateway.config.listen import ListenLimits
from gateway.server.acceptor import Acceptor
from gateway.server.connection_cap import Connections
from gateway.server.gc_pacing import pace_full_collections
from gateway.server.listener import GuardedProtocol
from gateway.server.probes import ProbeServer

log = logging.getLogger("gateway.server.serve")

RESERVED_FDS = 64
"""Descriptors kept for what is not a client connection: listeners, backend checks, logs, the loop."""
BACKLOG = 4096
"""Connections the kernel holds for a listener until they are accepted."""
END_MARGIN = 2.0
"""Seconds after the grace for the ended requests to write their last bytes."""
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Lifecycle(Protocol):
    """What the server asks of the application besides ASGI."""

    @property
    def grace(self) -> float:
        """Seconds running requests may take to finish once shutdown begins (read at shutdown)."""
        ...

    def begin_shutdown(self) -> None: ...

    def end_requests(self) -> None: ...

    def reload(self) -> object: ...

    def health(self) -> tuple[int, Mapping[str, object]]: ...


class GatewayApp(Lifecycle, Protocol):
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None: ...


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit where allowed; returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connection_cap(limits: ListenLimits, fd_limit: int) -> int:
    """The public cap: two descriptors per connection (one upstream), after the reserved ones and
    the admin port's (one each: it calls no backend)."""
    return max(1, min(limits.max_connections, (fd_limit - RESERVED_FDS - ADMIN_CONNECTIONS) // 2))


def bind(host: str, port: int, *, reuse_port: bool = False, backlog: int = BACKLOG) -> socket.socket:
    """A listening socket; `reuse_port` for one of several worker processes sharing the address."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


PROBES = "health probes"
"""What the probe port's socket serves (answered by a thread, not by an acceptor)."""
ADMIN = "metrics and admin"
"""What the admin port's socket serves."""
ADMIN_CONNECTIONS = 64
"""The admin port's own connection cap, apart from the public one: a flood of the public port,
which may fill its cap with requests in progress, cannot lock operators out of /metrics and
/admin/*, and scrapers and operators need a few connections, not thousands."""


def listeners(config: GatewayConfig, public: socket.socket | None) -> list[tuple[str, socket.socket]]:
    """What each socket serves, and the socket: the public one (given by a worker supervisor, or
    bound here), then the admin one and the probe one, each if configured."""
    named = [("serving", public if public is not None else bind(config.host, config.port))]
    try:
        for what, port in ((ADMIN, config.admin.port), (PROBES, config.admin.probe_port)):
            if port is not None:
                named.append((what, bind(config.admin.host, port, reuse_port=public is not None)))
    except OSError:
        for _, sock in named:
            sock.close()
        raise
    return named


class GatewayServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        app: Lifecycle,
        probe: socket.socket | None = None,
        *,
        connections: Mapping[socket.socket, Connections] | None = None,
        header_timeout: float = 30.0,
    ) -> None:
        """`probe`: the probe port's socket, answered from a thread rather than by an acceptor;
        `connections`: per listening socket, the cap its protocols admit under, which also counts
        the connections its acceptor holds unread (gateway/server/acceptor.py)."""
        super().__init__(config)
        self._app = app
        self._connections = dict(connections or {})
        self._header_timeout = header_timeout
        self._grace_over = asyncio.Event()
        self._acceptors: list[Acceptor] = []
        self._probe_socket = probe
        self._probe: tuple[ProbeServer, asyncio.Task[None]] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """The application's lifespan startup, the collector paced (gateway/server/gc_pacing.py), then the
        probe port's thread and an acceptor on each listening socket."""
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            raise SystemExit(STARTUP_FAILURE)
        pace_full_collections()
        if self._probe_socket is not None:
            probe = ProbeServer(self._probe_socket, self._app.health)
            probe.start()
            self._probe = (probe, asyncio.create_task(probe.heartbeat()))
        self._acceptors = []
        for sock in sockets or []:
            cap = self._connections.get(sock)
            protocol = functools.partial(self._new_protocol, cap)
            self._acceptors.append(
                Acceptor(sock, protocol, connections=cap, header_timeout=self._header_timeout)
            )
        self.started = True

    def _new_protocol(self, connections: Connections | None = None) -> asyncio.Protocol:
        """A protocol for a new connection, admitted under `connections` (else the one configured)."""
        extra = {} if connections is None else {"connections": connections}
        return self.config.http_protocol_class(  # type: ignore[call-arg]
            config=self.config, server_state=self.server_state, app_state=self.lifespan.state, **extra
        )

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        loop = asyncio.get_running_loop()
        handlers = {signal.SIGTERM: self._stop, signal.SIGINT: self._stop, signal.SIGHUP: self._app.reload}
        for sig, handler in handlers.items():
            loop.add_signal_handler(sig, handler)
        try:
            yield
        finally:
            for sig in handlers:
                loop.remove_signal_handler(sig)

    def _stop(self) -> None:
        if self.should_exit:
            log.info("second stop signal: ending the shutdown grace now")
            self._grace_over.set()
            return
        self.should_exit = True
        self._app.begin_shutdown()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for acceptor in self._acceptors:
            acceptor.close()
        for sock in sockets or []:
            sock.close()
        self._app.begin_shutdown()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        if not await self._requests_done(self._app.grace, self._grace_over):
            log.info("shutdown grace over: ending %d requests still running", len(self.server_state.tasks))
            self._app.end_requests()
            if not await self._requests_done(END_MARGIN):
                for connection in list(self.server_state.connections):
                    connection.transport.abort()
                await self._requests_done(END_MARGIN)
        await self.lifespan.shutdown()
        if self._probe is not None and self._probe_socket is not None:
            probe, heartbeat = self._probe
            heartbeat.cancel()
            await asyncio.to_thread(probe.close)
            self._probe_socket.close()

    async def _requests_done(self, seconds: float, interrupt: asyncio.Event | None = None) -> bool:
        """Wait until no request runs (True), `seconds` pass or `interrupt` is set (False)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        early = asyncio.ensure_future((interrupt or asyncio.Event()).wait())
        try:
            while self.server_state.tasks and not early.done() and (left := end - loop.time()) > 0:
                await asyncio.wait(
                    {*self.server_state.tasks, early}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
        finally:
            early.cancel()
        return not self.server_state.tasks


def _log_fd_cap(cap: int, wanted: int, fd_limit: int) -> None:
    """Say that descriptors cap client connections, and how to change it; a warning only when the
    cap is under a `max_connections` the user set (under the default it is routine)."""
    chosen = wanted != ListenLimits().max_connections
    log.log(
        logging.WARNING if chosen else logging.INFO,
        "at most %d client connections, not listen.max_connections %d: the process may open %d files "
        "(ulimit -n) and each connection may need 2; raise the hard limit (ulimit -Hn; LimitNOFILE= "
        "under systemd, --ulimit nofile= in Docker) to %d, or lower listen.max_connections",
        cap,
        wanted,
        fd_limit,
        2 * wanted + RESERVED_FDS + ADMIN_CONNECTIONS,
    )


async def serve(
    app: GatewayApp, config: GatewayConfig, *, log_level: str = "info", public: socket.socket | None = None
) -> None:
    """Serve until a stop signal; on `public` when given (bound by a worker supervisor)."""
    fd_limit = raise_fd_limit()
    cap = connection_cap(config.limits, fd_limit)
    if cap < config.limits.max_connections:
        _log_fd_cap(cap, config.limits.max_connections, fd_limit)
    public_cap = Connections(cap)
    protocol = functools.partial(GuardedProtocol, limits=config.limits, connections=public_cap)
    uv_config = uvicorn.Config(
        app,
        http=protocol,  # type: ignore[arg-type]
        lifespan="on",
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=config.limits.keep_alive_timeout,  # type: ignore[arg-type]
        server_header=False,
        date_header=False,
        proxy_headers=False,  # X-Forwarded-For is appended to, never believed (gateway.proxy.request)
    )
    named = listeners(config, public)
    for what, sock in named:
        host, port = sock.getsockname()[:2]
        log.info("%s on http://%s:%d", what, f"[{host}]" if ":" in host else host, port)
    probe = next((sock for what, sock in named if what == PROBES), None)
    sockets = [sock for what, sock in named if what != PROBES]
    caps = {sock: Connections(ADMIN_CONNECTIONS) if what == ADMIN else public_cap for what, sock in named}
    server = GatewayServer(
        uv_config, app, probe, connections=caps, header_timeout=config.limits.header_timeout
    )
    await server.serve(sockets=sockets)


def run(
    app: GatewayApp, config: GatewayConfig, *, log_level: str = "info", public: socket.socket | None = None
) -> None:
    logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT)
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(app, config, log_level=log_level, public=public))
    else:
        uvloop.run(serve(app, config, log_level=log_level, public=public))
