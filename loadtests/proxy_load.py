"""The loads and backends of bench_proxy: wrk for single answers, many paced streams, static backends.

- `wrk_run`: wrk (C, one thread) POSTing a chat completion; requests/s and P50 latency.
- `streams_run`: `streams` users, each on its own keep-alive connection, streaming completions back to
  back for a window; every arrival of a token event is timestamped (loadtests.http_client), so the
  run gives the events relayed per second and the gaps between a stream's consecutive events.
- `nginx_backend`: nginx serving a constant chat completion (the cheapest backend there is, so the
  proxy in front of it is what the CPU goes to); `source_backend`: loadtests.sse_source, paced
  streams.
The CPU each measured process spent in a run is read from /proc (loadtests.proc_cpu) around it.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from loadtests.http_client import Connection
from loadtests.proc_cpu import process_seconds
from loadtests.sse_source import _COMPLETION, _MODELS
from tests.procs import Proc, free_port, spawn

BODY = '{"model":"instant","messages":[{"role":"user","content":"hi"}],"max_tokens":1}'
STREAM_BODY = b'{"model":"instant","prompt":"go","max_tokens":50,"stream":true}'
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def wrk_run(url: str, connections: int, seconds: float) -> tuple[float, float]:
    """(requests/s, P50 latency in seconds) from one wrk run of `seconds` at `connections`."""
    lua = f'wrk.method = "POST"\nwrk.body = \'{BODY}\'\nwrk.headers["Content-Type"] = "application/json"\n'
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(lua)
        script.flush()
        cmd = ["wrk", "-t1", f"-c{connections}", f"-d{round(seconds)}s", "--latency", "-s", script.name]
        out = subprocess.run(
            [*cmd, f"{url}/v1/chat/completions"], capture_output=True, text=True, check=True
        ).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"errors during the run:\n{out}")
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    if rps is None or p50 is None:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    return float(rps.group(1)), float(p50.group(1)) * _UNITS[p50.group(2)]


@dataclass
class StreamRun:
    events: int = 0
    seconds: float = 0.0
    gaps: list[float] = field(default_factory=list)
    """Gaps between consecutive events of one stream, both inside the window."""
    failed: int = 0

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


class _Opening:
    """Holds the users until every connection is open (thousands take a while to be accepted); the
    warm-up and then the measured window start from there."""

    def __init__(self, users: int, warmup: float, seconds: float) -> None:
        self._left = users
        self._all = asyncio.Event()
        self._warmup, self._seconds = warmup, seconds
        self.window = (0.0, 0.0)

    async def opened(self) -> tuple[float, float]:
        self._left -= 1
        if not self._left:
            start = time.perf_counter() + self._warmup
            self.window = (start, start + self._seconds)
            self._all.set()
        await self._all.wait()
        return self.window

    async def all_open(self) -> None:
        await self._all.wait()


async def _user(url: str, opening: _Opening, run: StreamRun) -> None:
    conn = Connection.to(url)
    try:
        await conn.connect()
        start, end = await opening.opened()
        while True:
            arrivals: list[float] = []
            try:
                answer = await conn.post("/v1/completions", STREAM_BODY, stamps=True, into=arrivals)
            except (ConnectionError, asyncio.IncompleteReadError):
                run.failed += 1
                conn.close()
                continue
            finally:
                kept = [t for t in arrivals if start <= t < end]
                run.events += len(kept)
                run.gaps.extend(b - a for a, b in itertools.pairwise(kept))
            if answer.status != 200:
                run.failed += 1
    finally:
        conn.close()


def streams_run(url: str, streams: int, warmup: float, seconds: float) -> StreamRun:
    """`streams` concurrent users streaming back to back: once every connection is open, `warmup`
    seconds, then the measured window of `seconds`, at whose end every stream is cut."""
    import uvloop

    async def go() -> StreamRun:
        run = StreamRun(seconds=seconds)
        opening = _Opening(streams, warmup, seconds)
        users = [asyncio.create_task(_user(url, opening, run)) for _ in range(streams)]
        await opening.all_open()
        await asyncio.sleep(opening.window[1] - time.perf_counter())
        for user in users:
            user.cancel()
        failed = [r for r in await asyncio.gather(*users, return_exceptions=True) if isinstance(r, Exception)]
        if failed:
            raise RuntimeError(f"{len(failed)} users failed: {failed[0]!r}")
        run.gaps.sort()
        return run

    return uvloop.run(go())


def quiet(source: str, timeout: float = 120.0) -> None:
    """Wait until loadtests.sse_source at `source` has no stream open: a proxy that does not pass on
    a client's leaving (the minimal one) keeps reading streams whose client is gone."""
    import orjson

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{source}/health", timeout=5) as resp:
                if orjson.loads(resp.read()).get("streams", 0) == 0:
                    return
        except TimeoutError:
            continue  # busy ending thousands of streams: ask again
        time.sleep(0.2)  # polling a benchmark's backend between runs
    raise TimeoutError(f"{source} still streams after {timeout:g} s")


def cpu_of(pid: int) -> float:
    return process_seconds(pid, descendants=True)


_NGINX_CONF = """daemon off;
master_process off;
worker_processes 1;
error_log {dir}/error.log error;
pid {dir}/nginx.pid;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  keepalive_requests 100000000;
  client_body_temp_path {dir}; proxy_temp_path {dir}; fastcgi_temp_path {dir};
  uwsgi_temp_path {dir}; scgi_temp_path {dir};
  server {{
    listen 127.0.0.1:{port} backlog=8192;
    default_type application/json;
    location = /health {{ return 200 '{{}}'; }}
    location = /metrics {{ return 404; }}
    location = /v1/models {{ return 200 '{models}'; }}
    location / {{ return 200 '{completion}'; }}
  }}
}}
"""


@contextmanager
def nginx_backend() -> Iterator[Proc]:
    """nginx on a free loopback port answering every POST with a constant chat completion."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    with tempfile.TemporaryDirectory(prefix="bench-nginx-") as tmp:
        port = free_port()
        conf = Path(tmp) / "nginx.conf"
        conf.write_text(
            _NGINX_CONF.format(dir=tmp, port=port, models=_MODELS.decode(), completion=_COMPLETION.decode())
        )
        base = f"http://127.0.0.1:{port}"
        with spawn([binary, "-p", tmp, "-c", str(conf)], f"{base}/health", base_url=base) as proc:
            yield proc


def have_nginx() -> bool:
    return shutil.which("nginx") is not None or Path("/usr/sbin/nginx").exists()


def source_backend(interval: float, tokens: int) -> Proc:
    """loadtests.sse_source on a free loopback port: `tokens` events a stream, one per `interval`."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "loadtests.sse_source", str(port)]
    cmd += ["--interval", str(interval), "--tokens", str(tokens)]
    return spawn(cmd, f"{base}/health", base_url=base)


def minimal_proxy(upstream: str, script: Path | None = None) -> Proc:
    """The minimal proxy (loadtests.minproxy, or `script` taking the same PORT UPSTREAM arguments)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    head = [sys.executable, str(script)] if script else [sys.executable, "-m", "loadtests.minproxy"]
    return spawn([*head, str(port), upstream], f"{base}/health", base_url=base)
