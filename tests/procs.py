"""Subprocesses for tests and benchmarks: start, wait until an HTTP URL answers 200, stop by pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Proc:
    """A started subprocess; a context manager that terminates it (then kills it) on exit."""

    def __init__(self, popen: subprocess.Popen[bytes], url: str) -> None:
        self.popen = popen
        self.url = url
        self.log: IO[bytes] | None = None
        self.config_path = ""
        """A config file the process reads at start, removed once it is ready."""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stderr(self) -> str:
        """What the process wrote to stderr so far (its log)."""
        if self.log is None:
            return ""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self, timeout: float = 5.0) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout)
        if self.log is not None:
            self.log.close()
            self.log = None

    def __enter__(self) -> Proc:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def launch(cmd: list[str], base_url: str, cwd: Path = ROOT) -> Proc:
    """Start `cmd` in `cwd` without waiting for it; `ready` waits. `.url` is `base_url`."""
    # A file, not a pipe: a chatty child can never block on a full pipe nobody reads.
    log = tempfile.TemporaryFile()  # noqa: SIM115 - owned by the returned Proc
    popen = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=log)
    proc = Proc(popen, base_url)
    proc.log = log
    return proc


def ready(proc: Proc, url_for_ready: str, timeout: float = 20.0) -> Proc:
    """Wait until GET `url_for_ready` answers 200; stop `proc` and raise if it exits or times out."""
    deadline = time.monotonic() + timeout
    try:
        while not _answers(url_for_ready):
            if not proc.alive():
                err = proc.stderr()
                raise RuntimeError(
                    f"{proc.popen.args!r:.200} exited with {proc.popen.returncode}: {err[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url_for_ready} did not answer within {timeout} s")
            time.sleep(0.05)  # start-up only: the process gives no other readiness signal
    except BaseException:
        proc.stop()
        raise
    return proc


def spawn(
    cmd: list[str], url_for_ready: str, timeout: float = 20.0, base_url: str = "", cwd: Path = ROOT
) -> Proc:
    """Start `cmd` in `cwd`, wait until GET `url_for_ready` answers 200; `.url` is `base_url`."""
    return ready(launch(cmd, base_url or url_for_ready, cwd), url_for_ready, timeout)


def spawn_sim(*extra_args: str, timeout: float = 20.0) -> Proc:
    """`llm-gateway sim` on a free loopback port, ready to serve; `.url` is its base URL."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "gateway.cli", "sim", "--port", str(port), *extra_args]
    return spawn(cmd, f"{base}/health", timeout, base_url=base)


def spawn_gateway(
    config: dict[str, object],
    *,
    timeout: float = 20.0,
    ready: str = "/admin/state",
    prefix: Sequence[str] = (),
) -> Proc:
    """`llm-gateway serve --config` on a free loopback port with `config` (listen.host and .port are
    filled in); ready once GET `ready` answers 200. `prefix` runs it under a wrapper (prlimit)."""
    (proc,) = spawn_gateways(config, 1, timeout=timeout, ready_path=ready, prefix=prefix)
    return proc


def spawn_gateways(
    config: dict[str, object],
    n: int,
    *,
    timeout: float = 20.0,
    ready_path: str = "/admin/state",
    prefix: Sequence[str] = (),
    args: Sequence[str] = (),
) -> list[Proc]:
    """`n` gateways as `spawn_gateway` starts one, each on its own port, started together and then
    waited for (start-up is mostly imports: they overlap on the cores); all stopped if one fails.
    `args` are more flags for `serve`."""
    import yaml

    started: list[Proc] = []
    try:
        for _ in range(n):
            port = free_port()
            listen = config.get("listen") or {}
            assert isinstance(listen, dict)
            one = {**config, "listen": {**listen, "host": "127.0.0.1", "port": port}}
            fd, path = tempfile.mkstemp(suffix=".yaml", prefix="gateway-")
            with os.fdopen(fd, "w") as f:
                yaml.safe_dump(one, f)
            cmd = [*prefix, sys.executable, "-m", "gateway.cli", "serve", "--config", path]
            started.append(launch([*cmd, *args, "--log-level", "warning"], f"http://127.0.0.1:{port}"))
            started[-1].config_path = path
        for proc in started:
            ready(proc, f"{proc.url}{ready_path}", timeout)
    except BaseException:
        for proc in started:
            proc.stop()
        raise
    finally:
        for proc in started:
            if proc.config_path:
                os.unlink(proc.config_path)
                proc.config_path = ""
    return started
