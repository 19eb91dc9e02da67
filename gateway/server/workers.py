"""`llm-gateway serve --workers N`: N gateway processes on one host, one port, one supervisor.

Each worker is a whole gateway (its own event loop, app and connections) listening on its own
socket bound with SO_REUSEPORT to the same address, so the kernel spreads new connections over the
workers' accept queues, with no accept lock and no shared socket to fight over (the arrangement
nginx and Envoy use on Linux). One event loop saturates one core at a few thousand streamed tokens
per second; workers add cores.

The supervisor binds the address first without listening: that resolves port 0 once, so every
worker joins the same port, and it keeps the port taken between worker restarts. A bound socket
that does not listen gets no connections. It forwards SIGTERM and SIGINT to the workers (each
drains for `shutdown_grace`; any still running `KILL_AFTER` seconds later is killed, one deadline
for all, since they drain side by side) and SIGHUP (each reloads the config file), and starts a
worker again when one exits on its own or is killed, unless it exits with an error code within
`FAST_EXIT` seconds of starting (a bad config, a port it may not bind): starting it again would
fail the same way, so everything stops with that code.

Workers share nothing in memory: more than one needs shared state (`state.redis_url`), which the
CLI enforces.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import time
from multiprocessing.process import BaseProcess
from types import FrameType

from gateway.config import GatewayConfig
from gateway.config.source import ConfigSource

log = logging.getLogger(__name__)

FAST_EXIT = 5.0
"""A worker that exits sooner than this after starting is not restarted."""

KILL_AFTER = 5.0
"""Seconds past `shutdown_grace` that the workers get to end their lifespan before being killed."""


def reuseport_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) with SO_REUSEPORT, not yet listening."""
    if not hasattr(socket, "SO_REUSEPORT"):
        raise OSError("SO_REUSEPORT is not available on this platform: run one worker")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _worker(config: GatewayConfig, source: ConfigSource, port: int, log_level: str) -> None:
    from gateway.app import create_app
    from gateway.server.serve import bind, run

    sock = bind(config.host, port, reuse_port=True)
    run(create_app(config, source=source), config, log_level=log_level, public=sock)


class Supervisor:
    def __init__(self, config: GatewayConfig, source: ConfigSource, workers: int, log_level: str) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._config = config
        self._source = source
        self._count = workers
        self._log_level = log_level
        self._context = multiprocessing.get_context("spawn")
        self._procs: dict[int, tuple[BaseProcess, float]] = {}
        self._stopping = False
        self.port = 0

    def _start(self, index: int) -> None:
        proc = self._context.Process(
            target=_worker,
            args=(self._config, self._source, self.port, self._log_level),
            name=f"llm-gateway-worker-{index}",
        )
        proc.start()
        self._procs[index] = (proc, time.monotonic())

    def _signal(self, signum: int, _frame: FrameType | None) -> None:
        self._stopping = True
        for proc, _ in self._procs.values():
            if proc.pid is not None and proc.is_alive():
                proc.terminate()

    def _reload(self, signum: int, _frame: FrameType | None) -> None:
        """SIGHUP: each worker reloads the config file itself."""
        for proc, _ in self._procs.values():
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGHUP)

    def run(self) -> int:
        """Start the workers and supervise them until a signal; the exit code to return."""
        from gateway.server.serve import LOG_FORMAT

        logging.basicConfig(level=self._log_level.upper(), format=LOG_FORMAT)
        reserved = reuseport_socket(self._config.host, self._config.port)
        self.port = reserved.getsockname()[1]
        previous = {s: signal.signal(s, self._signal) for s in (signal.SIGTERM, signal.SIGINT)}
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._reload)
        try:
            for index in range(self._count):
                self._start(index)
            log.info("%d workers on %s:%d", self._count, self._config.host, self.port)
            return self._supervise()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            self._signal(signal.SIGTERM, None)
            deadline = time.monotonic() + self._config.shutdown_grace + KILL_AFTER
            for proc, _ in self._procs.values():
                proc.join(max(0.0, deadline - time.monotonic()))
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            reserved.close()

    def _supervise(self) -> int:
        while not self._stopping:
            sentinels = {proc.sentinel: index for index, (proc, _) in self._procs.items()}
            for ready in multiprocessing.connection.wait(list(sentinels)):
                if not isinstance(ready, int):
                    continue
                index = sentinels[ready]
                proc, started = self._procs[index]
                proc.join()
                if self._stopping:
                    break
                code = proc.exitcode or 0
                if code > 0 and time.monotonic() - started < FAST_EXIT:
                    log.error("worker %d exited with %s right after starting; stopping", index, code)
                    return code
                log.warning("worker %d exited with %s; starting it again", index, code)
                self._start(index)
        return 0
