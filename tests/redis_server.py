"""A real Redis server (Debian's redis-server) for tests: loopback, a free port, stopped by its pid.

The binary comes from scripts/install-redis.sh, run here when it is missing so a fresh machine
needs nothing else. The server keeps nothing on disk (no RDB, no AOF): a stop and start is a Redis
that lost every key, the hardest case for the gateway's rebuild.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.procs import ROOT, free_port

BINARY = ROOT / ".tools" / "redis" / "bin" / "redis-server"


def redis_binary() -> Path:
    if not BINARY.exists():
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "install-redis.sh"), str(BINARY.parent.parent)], check=True
        )
    return BINARY


def _answers_ping(port: int, tls: bool) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as raw:
            sock = raw
            if tls:  # readiness only: the tests check the certificate through the client
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
                sock = context.wrap_socket(raw)
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server process; `stop()` and `start()` again keep the port (and the URL).

    `tls=(cert, key)` serves TLS only, with that certificate; `sentinel_config` runs a Sentinel
    (the same binary with --sentinel) from that config text instead of a data server.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        tls: tuple[Path, Path] | None = None,
        sentinel_config: str | None = None,
    ) -> None:
        self.port = port or free_port()
        scheme = "rediss" if tls else "redis"
        self.url = f"{scheme}://127.0.0.1:{self.port}/0"
        self._tls = tls
        self._sentinel_config = sentinel_config
        self._popen: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="redis-test-")

    def _command(self) -> list[str]:
        binary = str(redis_binary())
        if self._sentinel_config is not None:
            config = Path(self._dir.name) / "sentinel.conf"  # Sentinel rewrites it: a file of its own
            config.write_text(self._sentinel_config)
            return [binary, str(config), "--sentinel", "--port", str(self.port), "--bind", "127.0.0.1"]
        port = ["--port", str(self.port)]
        if self._tls is not None:
            cert, key = self._tls
            port = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(cert)]
            port += ["--tls-key-file", str(key), "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"]
        return [
            binary,
            *port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self._dir.name,
        ]

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    def start(self, timeout: float = 10.0) -> None:
        assert self._popen is None, "already running"
        cmd = [*self._command(), "--daemonize", "no", "--loglevel", "warning"]
        self._popen = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not _answers_ping(self.port, self._tls is not None):
            if self._popen.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        popen, self._popen = self._popen, None
        if popen is None:
            return
        if popen.poll() is None:
            os.kill(popen.pid, sig)
            try:
                popen.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(popen.pid, signal.SIGKILL)
                popen.wait(5)

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()


@contextmanager
def running_redis() -> Iterator[RedisServer]:
    """A started server, closed (stopped by its pid, its directory removed) on exit."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()
