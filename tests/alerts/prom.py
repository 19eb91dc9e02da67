"""Real Prometheus and Alertmanager servers for tests, from Debian's packages unpacked in .tools/.

`make promtool` (run by `make test`) installs them with scripts/install-prometheus.sh. Each server runs
in its own temporary directory on a free loopback port, is ready (`/-/ready` answers 200) when the
context manager yields, and is stopped by its pid (SIGTERM, then SIGKILL) when it exits.

    with running_prometheus(config, rules={"alerts.yml": text}, workdir=tmp_path) as prom:
        prom.wait_for_alert("GatewayCapacityExhausted", "firing", timeout=30)

Pytest fixtures `prometheus_server` and `alertmanager_server` are factories over the same context
managers; whatever they start is stopped at the end of the test.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import re
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.procs import Proc, free_port

ROOT = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("LLM_GATEWAY_PROMETHEUS_TOOLS", ROOT / ".tools" / "prometheus"))
ALERTS = ROOT / "config" / "alerts.yml"
PROMETHEUS_CONFIG = ROOT / "config" / "prometheus.yml"
# Debian's alertmanager binary reads its built-in notification templates from here; the install
# script puts them there (the package would have).
ALERTMANAGER_TEMPLATES = Path("/usr/share/prometheus/alertmanager/default.tmpl")


def tool(name: str) -> Path:
    """Path of prometheus, promtool, alertmanager or amtool; skips the test if not installed."""
    path = TOOLS / "bin" / name
    if not path.exists():
        pytest.skip(f"{path} is missing: run `make promtool` (make test runs it first)")
    return path


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as err:
        return int(err.code), bytes(err.read())


# --- durations -----------------------------------------------------------------------------------

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w)")


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration such as `5m`, `1h30m` or `500ms`."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def scale_durations(rules_text: str, factor: float) -> str:
    """The rules with every `for:` and every range window (`[5m]`) multiplied by `factor`.

    Lets a test run the shipped rules against a live Prometheus in seconds instead of minutes
    (factor 1/60 turns minutes into seconds) without keeping a second copy of the rules. The
    expressions, thresholds, labels and annotations are left as they are.
    """

    def scaled(match: re.Match[str]) -> str:
        return format_duration(parse_duration(match.group(2)) * factor)

    text = re.sub(
        r"^([ \t]*(?:for|keep_firing_for):[ \t]*)(\S+)[ \t]*$",
        lambda m: m.group(1) + scaled(m),
        rules_text,
        flags=re.MULTILINE,
    )
    return re.sub(r"(\[)((?:\d+(?:ms|s|m|h|d|w))+)(\])", lambda m: f"[{scaled(m)}]", text)


# --- servers -------------------------------------------------------------------------------------


class Server(Proc):
    """A running Prometheus or Alertmanager: its URL, its process and its log file."""

    def __init__(self, popen: subprocess.Popen[bytes], url: str, workdir: Path, log: Path) -> None:
        super().__init__(popen, url)
        self.workdir = workdir
        self.log_path = log

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def get_json(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        status, body = http_get(f"{self.url}{path}{query}")
        payload = json.loads(body)
        if status != 200:
            raise AssertionError(f"GET {path}{query}: {status} {payload}")
        return payload

    def query(self, expr: str) -> Any:
        """Prometheus only: the result of an instant query; AssertionError if it does not parse."""
        return self.get_json("/api/v1/query", query=expr)["data"]["result"]

    def alerts(self) -> list[dict[str, Any]]:
        """Prometheus only: active alerts (`pending` or `firing`) from /api/v1/alerts."""
        return list(self.get_json("/api/v1/alerts")["data"]["alerts"])

    def wait_for_alert(
        self, name: str, state: str | None, timeout: float, interval: float = 0.25
    ) -> dict[str, Any] | None:
        """Poll /api/v1/alerts until alert `name` is in `state` (None: until it is gone)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [a for a in self.alerts() if a["labels"].get("alertname") == name]
            if state is None and not found:
                return None
            for alert in found:
                if alert["state"] == state:
                    return alert
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} not {state or 'gone'} after {timeout}s: {found}")
            time.sleep(interval)

    def stop(self, timeout: float = 10.0) -> None:
        super().stop(timeout)  # Prometheus flushes its TSDB on SIGTERM: allow it longer


def _wait_ready(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if not server.alive():
            raise RuntimeError(f"exited with {server.popen.returncode}:\n{server.log_tail()}")
        try:
            status, _ = http_get(f"{server.url}/-/ready", timeout=1.0)
        except OSError:
            status = 0
        if status == 200:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"not ready after {timeout}s:\n{server.log_tail()}")
        time.sleep(0.1)


@contextmanager
def _serve(
    command: Callable[[int], list[str]], workdir: Path, name: str, ready_timeout: float
) -> Iterator[Server]:
    """Start `command(port)` on a free port; a second port is tried if the first was taken."""
    for attempt in range(3):
        port = free_port()
        log = workdir / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                command(port), cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        server = Server(popen, f"http://127.0.0.1:{port}", workdir, log)
        try:
            _wait_ready(server, ready_timeout)
        except RuntimeError as err:
            server.stop()
            if attempt < 2 and "address already in use" in str(err):
                continue
            raise RuntimeError(f"{name}: {err}") from None
        try:
            yield server
        finally:
            server.stop()
        return


def _write_rules(workdir: Path, rules: Mapping[str, str] | Sequence[Path]) -> list[str]:
    items = rules.items() if isinstance(rules, Mapping) else [(p.name, p.read_text()) for p in rules]
    names = []
    for name, text in items:
        (workdir / name).write_text(text)
        names.append(name)
    return names


@contextmanager
def running_prometheus(
    config: Mapping[str, Any],
    workdir: Path,
    rules: Mapping[str, str] | Sequence[Path] = (),
    ready_timeout: float = 30.0,
) -> Iterator[Server]:
    """A Prometheus with `config` (a prometheus.yml as a mapping) whose `rule_files` are replaced by
    `rules`: file name to text, or paths to copy. Everything lives in `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = dict(config)
    cfg["rule_files"] = _write_rules(workdir, rules)
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    binary = tool("prometheus")

    def command(port: int) -> list[str]:
        return [
            str(binary),
            "--config.file=prometheus.yml",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]

    with _serve(command, workdir, "prometheus", ready_timeout) as server:
        yield server


@contextmanager
def running_alertmanager(
    config: Mapping[str, Any], workdir: Path, ready_timeout: float = 30.0
) -> Iterator[Server]:
    """An Alertmanager with `config` (an alertmanager.yml as a mapping), clustering off."""
    binary = tool("alertmanager")
    if not ALERTMANAGER_TEMPLATES.exists():
        pytest.skip(
            f"{ALERTMANAGER_TEMPLATES} is missing: Debian's alertmanager needs it; run "
            "`make promtool` as root"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "alertmanager.yml").write_text(yaml.safe_dump(dict(config), sort_keys=False))

    def command(port: int) -> list[str]:
        return [
            str(binary),
            "--config.file=alertmanager.yml",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            # Gossip would listen on 0.0.0.0:9094; a single instance needs none.
            "--cluster.listen-address=",
            "--log.level=warn",
        ]

    with _serve(command, workdir, "alertmanager", ready_timeout) as server:
        yield server


def minimal_config(
    targets: Mapping[str, Sequence[str]] | None = None,
    interval: str = "1s",
    alertmanagers: Sequence[str] = (),
) -> dict[str, Any]:
    """A prometheus.yml mapping: one job per `targets` entry (job name to host:port list),
    scrape and evaluation every `interval`, alerts sent to `alertmanagers` (host:port)."""
    cfg: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": list(hosts)}]}
            for job, hosts in (targets or {}).items()
        ],
    }
    if alertmanagers:
        cfg["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]}
    return cfg


class WebhookReceiver:
    """A loopback HTTP server that records the JSON bodies Alertmanager's webhook posts to it."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        self.received: queue.Queue[dict[str, Any]] = queue.Queue()

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        """The first notification for which `predicate` is true; AssertionError after `timeout`."""
        deadline = time.monotonic() + timeout
        seen: list[dict[str, Any]] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no matching notification in {timeout}s; got {seen}")
            try:
                payload = self.received.get(timeout=left)
            except queue.Empty:
                continue
            if predicate(payload):
                return payload
            seen.append(payload)


@contextmanager
def webhook_receiver() -> Iterator[WebhookReceiver]:
    holder: list[WebhookReceiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            holder[0].received.put(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(WebhookReceiver(server))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# --- fixtures ------------------------------------------------------------------------------------

StartPrometheus = Callable[..., Server]
StartAlertmanager = Callable[..., Server]


@contextmanager
def _server_factory(
    tmp_path: Path, name: str, running: Callable[..., AbstractContextManager[Server]]
) -> Iterator[Callable[..., Server]]:
    """`start(config, **kwargs)` runs `running(config, workdir, **kwargs)` in a fresh work directory
    per call; every server started is stopped when the block ends."""
    with ExitStack() as stack:
        count = itertools.count(1)

        def start(config: Mapping[str, Any], **kwargs: Any) -> Server:
            workdir = tmp_path / f"{name}-{next(count)}"
            return stack.enter_context(running(config, workdir, **kwargs))

        yield start


@pytest.fixture
def prometheus_server(tmp_path: Path) -> Iterator[StartPrometheus]:
    """Factory: `prometheus_server(config, rules=...)` starts a ready Prometheus, stopped after the
    test. Arguments as for `running_prometheus`, without the work directory."""
    with _server_factory(tmp_path, "prometheus", running_prometheus) as start:
        yield start


@pytest.fixture
def alertmanager_server(tmp_path: Path) -> Iterator[StartAlertmanager]:
    """Factory: `alertmanager_server(config)` starts a ready Alertmanager, stopped after the test."""
    with _server_factory(tmp_path, "alertmanager", running_alertmanager) as start:
        yield start
