"""The pictures in the README: the controller during an overload, and the dashboard's panels.

Two simulated vLLM servers (the demo's profile) behind a gateway with its default SLA (TTFT P90
1 s), a Prometheus from .tools/ (`make promtool`) scraping the gateway every second, and a closed
loop of streaming clients (loadtests.http_client, light enough not to starve the host): `--base`
clients, then `--peak` for the overload, then `--base` again. Each second the script reads
`/admin/state` (every backend's limit, in-flight count and TTFT P90; the model's queue depth); each
request's time to first token is timed at the client.

- docs/img/controller-overload.png: limit and in flight, TTFT P90 against the target, queue depth.
- docs/img/dashboard-panels.png: the Grafana dashboard's main panels, their PromQL queries
  (config/grafana/llm-gateway.json, variables set to All) run against that Prometheus and plotted
  with matplotlib: Grafana itself is not installed here.

    .venv/bin/python -m loadtests.plot_overload [--base 8] [--peak 120] [--phases 30 90 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from loadtests.http_client import Connection
from tests.alerts.prom import minimal_config, running_prometheus
from tests.procs import ROOT, Proc, spawn_gateway, spawn_sim

PROFILE = "gemma3-4b-rtx4080"
MODEL = "google/gemma-3-4b-it"
PROMPT = "Tell me about the sea. " * 60
"""About 360 tokens: with 300 out, some 20 requests fill a backend's 11,824-token KV cache."""
IMG = ROOT / "docs" / "img"
PANELS = (
    "Concurrency: $backend",
    "P90 against SLA: $backend",
    "Queue depth",
    "Shed rate by reason",
    "Requests by status",
    "Client TTFT and duration P90",
    "Controller adjustments",
    "KV-cache usage",
    "Requests waiting inside vLLM",
)


@dataclass
class Run:
    started: float = field(default_factory=time.monotonic)
    clients: int = 0
    states: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    ttfts: list[tuple[float, float]] = field(default_factory=list)
    """(when the first token came, seconds since the request was sent), at the client."""
    refused: list[tuple[float, int]] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.started


async def client(run: Run, url: str, index: int, stop: asyncio.Event) -> None:
    """One closed-loop user; a refused request waits a second (about what Retry-After says)."""
    conn = Connection.to(url)
    body = orjson.dumps(
        {"model": MODEL, "prompt": PROMPT, "max_tokens": 300, "ignore_eos": True, "stream": True}
    )
    try:
        while not stop.is_set():
            if index >= run.clients:
                await asyncio.sleep(0.2)
                continue
            answer = await conn.post("/v1/completions", body)
            if answer.status == 200 and answer.first is not None:
                run.ttfts.append((run.now() - (answer.ended - answer.first), answer.first - answer.sent))
            elif answer.status != 200:
                run.refused.append((run.now(), answer.status))
                await asyncio.sleep(1.0)
    finally:
        conn.close()


def poll_state(run: Run, url: str, stop: threading.Event) -> None:
    with httpx.Client(timeout=5.0) as http:
        while not stop.is_set():
            run.states.append((run.now(), http.get(f"{url}/admin/state").json()))
            stop.wait(1.0)


async def drive(run: Run, url: str, base: int, peak: int, phases: tuple[float, float, float]) -> None:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(client(run, url, i, stop)) for i in range(peak)]
    for clients, seconds in zip((base, peak, base), phases, strict=True):
        run.clients = clients
        await asyncio.sleep(seconds)
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def windowed_p90(
    points: list[tuple[float, float]], width: float, end: float
) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    t = width
    while t <= end:
        window = sorted(v for at, v in points if t - width <= at < t)
        if len(window) >= 5:
            xs.append(t)
            ys.append(window[min(len(window) - 1, int(0.9 * len(window)))])
        t += 1.0
    return xs, ys


def plot_controller(run: Run, phases: tuple[float, float, float], base: int, peak: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = [t for t, _ in run.states]
    backends = [b["name"] for b in run.states[0][1]["backends"]]
    target = run.states[0][1]["sla"]["ttft"]
    fig, axes = plt.subplots(3, 1, figsize=(9, 7.5), sharex=True)
    for name in backends:
        rows = [next(b for b in s["backends"] if b["name"] == name) for _, s in run.states]
        (line,) = axes[0].plot(ts, [r["limit"] for r in rows], label=f"{name} limit")
        axes[0].plot(
            ts, [r["inflight"] for r in rows], ":", color=line.get_color(), label=f"{name} in flight"
        )
        axes[1].plot(ts, [r["p90"].get("ttft") for r in rows], label=f"{name} TTFT P90 (engine side)")
    xs, ys = windowed_p90(run.ttfts, 10.0, run.now())
    axes[1].plot(xs, ys, color="black", label="client TTFT P90 (10 s window, queue included)")
    axes[1].axhline(target, color="red", linestyle="--", label=f"SLA target {target:g} s")
    depth = [sum(m["depth"] for m in s["models"].values()) for _, s in run.states]
    axes[2].plot(ts, depth, color="tab:purple", label="requests waiting in the gateway's queue")
    axes[0].set_ylabel("requests")
    axes[1].set_ylabel("seconds")
    axes[2].set_ylabel("requests")
    axes[2].set_xlabel("seconds")
    start, end = phases[0], phases[0] + phases[1]
    for ax in axes:
        ax.axvspan(start, end, color="orange", alpha=0.08)
        ax.legend(loc="upper left", fontsize=7)
        ax.grid(alpha=0.3)
    axes[0].set_title(
        f"Two simulated vLLM servers ({PROFILE}): {base} streaming clients, {peak} during the shaded "
        f"overload, then {base}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def panel_queries() -> list[tuple[str, list[tuple[str, str]]]]:
    dashboard = json.loads((ROOT / "config" / "grafana" / "llm-gateway.json").read_text())
    by_title = {p["title"]: p for p in dashboard["panels"]}
    out = []
    for title in PANELS:
        panel = by_title[title]
        queries = [(t.get("legendFormat", ""), t["expr"]) for t in panel["targets"]]
        out.append((title.replace(": $backend", ""), queries))
    return out


def promql(expr: str) -> str:
    """A panel's query as Grafana sends it with every variable set to All (5 s scrapes: 20 s rates)."""
    expr = expr.replace("$__rate_interval", "20s")
    expr = re.sub(r'(\w+)="\$\{?\w+\}?"', r'\1=~".*"', expr)  # a repeated panel's label = its value
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def legend(fmt: str, labels: dict[str, str]) -> str:
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)
    backend = labels.get("backend", "")
    if text and backend and backend not in text:  # a panel Grafana repeats per backend
        text = f"{backend} {text}"
    return text or ",".join(f"{k}={v}" for k, v in labels.items() if k not in ("instance", "job"))


def plot_dashboard(prom_url: str, start: float, end: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = panel_queries()
    fig, axes = plt.subplots(3, 3, figsize=(14, 9))
    with httpx.Client(timeout=30.0) as http:
        for ax, (title, queries) in zip(axes.flat, panels, strict=True):
            for fmt, expr in queries:
                params = {"query": promql(expr), "start": start, "end": end, "step": 2}
                result = http.get(f"{prom_url}/api/v1/query_range", params=params).json()["data"]["result"]
                for series in result:
                    xs = [float(t) - start for t, _ in series["values"]]
                    ys = [float(v) if v not in ("NaN", "+Inf") else float("nan") for _, v in series["values"]]
                    ax.plot(xs, ys, label=legend(fmt, series["metric"])[:40])
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("seconds", fontsize=8)
            ax.grid(alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=6, loc="upper left")
    fig.suptitle(
        "The Grafana dashboard's panel queries (config/grafana/llm-gateway.json), run against Prometheus "
        "during the overload and plotted with matplotlib (not a Grafana screenshot)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", type=int, default=8)
    parser.add_argument("--peak", type=int, default=120)
    parser.add_argument("--phases", type=float, nargs=3, default=(30.0, 90.0, 30.0), metavar="SECONDS")
    parser.add_argument("--out", type=Path, default=IMG)
    args = parser.parse_args()
    phases = (args.phases[0], args.phases[1], args.phases[2])
    sims: list[Proc] = [spawn_sim("--profile", PROFILE, "--seed", str(i)) for i in range(2)]
    try:
        config = {"backends": [{"url": s.url, "name": f"gpu-{i}"} for i, s in enumerate(sims)]}
        with spawn_gateway(config) as gateway, tempfile.TemporaryDirectory() as tmp:
            port = gateway.url.rsplit(":", 1)[1]
            prom_config = minimal_config({"llm-gateway": [f"127.0.0.1:{port}"]}, interval="1s")
            with running_prometheus(prom_config, Path(tmp)) as prom:
                run = Run()
                wall_start = time.time()
                stop = threading.Event()
                poller = threading.Thread(target=poll_state, args=(run, gateway.url, stop))
                poller.start()
                try:
                    asyncio.run(drive(run, gateway.url, args.base, args.peak, phases))
                finally:
                    stop.set()
                    poller.join()
                args.out.mkdir(parents=True, exist_ok=True)
                plot_controller(run, phases, args.base, args.peak, args.out / "controller-overload.png")
                plot_dashboard(prom.url, wall_start, time.time(), args.out / "dashboard-panels.png")
                refused = {}
                for _, status in run.refused:
                    refused[status] = refused.get(status, 0) + 1
                print(f"requests with a first token: {len(run.ttfts)}; refused by status: {refused}")
                print(f"wrote {args.out / 'controller-overload.png'} and {args.out / 'dashboard-panels.png'}")
    finally:
        for sim in sims:
            sim.stop()


if __name__ == "__main__":
    main()
