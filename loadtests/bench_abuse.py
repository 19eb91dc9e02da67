"""The abuse benchmark: each attack a careless or hostile client can make against a real
`llm-gateway serve` in front of two simulated vLLM servers, with what the gateway's process and its
clients see meanwhile.

For every attack, and for every gateway checkout compared (this one, and with `--compare PATH`
another, e.g. the main branch), interleaved per attack, a fresh gateway runs under a soft
descriptor limit of 1,024 (a common service default; the hard limit is the machine's) and:
- the attack runs for `--seconds` (loadtests/abuse/attacks.py and input_attacks.py), with ordinary
  requests and /health probes from new connections alongside (loadtests/abuse/watch.py says what
  each number means);
- afterwards, with the attack stopped, in-flight and queued requests must drain to 0;
- its log is searched for tracebacks.
Then a shutdown: 8 streams running and 42 requests queued, SIGTERM; when the queue is answered and
how, how the streams end, the exit status.

    .venv/bin/python -m loadtests.bench_abuse [--seconds 30] [--compare ../other-checkout] [--attacks ...]
        [--repeat N] [--docs docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from loadtests.abuse import probe, watch
from loadtests.abuse.attacks import ATTACKS as CONNECTION_ATTACKS
from loadtests.abuse.attacks import Target
from loadtests.abuse.input_attacks import INPUT_ATTACKS
from loadtests.abuse.shutdown import shutdown_table
from loadtests.doc_tables import write_block
from tests.procs import ROOT, Proc, free_port, spawn, spawn_sim

MODEL = "instant"
ATTACKS = {**CONNECTION_ATTACKS, **INPUT_ATTACKS}
SOFT_FD_LIMIT = 1024
BASELINE = "none (baseline)"


@dataclass
class Row:
    attack: str
    gateway: str
    seen: watch.Observed
    listeners: dict[str, watch.Observed]
    """/health probes on the admin and the probe listeners, by name (a checkout without one: absent)."""
    lag: tuple[float, float] | None
    left: tuple[int, int] | None
    alive: bool
    tracebacks: int
    counts: dict[str, int]


def gateway_config(sims: list[Proc], *, current: bool) -> dict[str, object]:
    config: dict[str, object] = {
        "backends": [{"url": s.url, "name": f"sim-{i}"} for i, s in enumerate(sims)],
        "controller": {"algorithm": "fixed", "params": {"limit": 4}},
        "queue": {"timeout": 10},
        "health": {"interval": 0.5},
    }
    if current:  # keys an older checkout does not know
        config["listen"] = {"write_timeout": 5}
        config["admin"] = {"port": free_port(), "probe_port": free_port()}
    return config


LISTENERS = {"admin": "port", "probe": "probe_port"}
"""The listeners /health is probed on besides the public one, and their `admin.` keys."""


def listener_ports(config: dict[str, object]) -> dict[str, int]:
    """The ports of the gateway's admin listener (/health, /metrics, /admin/*) and probe listener
    (/health from a thread), those it has."""
    admin = config.get("admin")
    if not isinstance(admin, dict):
        return {}
    return {name: admin[key] for name, key in LISTENERS.items() if admin.get(key) is not None}


def start_gateway(root: Path, config: dict[str, object], path: Path) -> tuple[Proc, dict[str, object]]:
    """The gateway of checkout `root` on a free port, its config (listen filled in) in `path`."""
    port = free_port()
    listen = config.get("listen") or {}
    assert isinstance(listen, dict)
    config = {**config, "listen": {**listen, "host": "127.0.0.1", "port": port}}
    path.write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{port}"
    serve = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--log-level", "warning"]
    cmd = ["prlimit", f"--nofile={SOFT_FD_LIMIT}:", *serve]
    return spawn(cmd, f"{url}/v1/models", 30, base_url=url, cwd=root), config


async def run_attack(attack: str, label: str, root: Path, sims: list[Proc], seconds: float) -> Row:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gateway.yaml"
        config = {
            **gateway_config(sims, current=root == ROOT),
            "batch": {"data_dir": str(Path(tmp) / "batch")},
        }
        gw, config = start_gateway(root, config, path)
        target = Target(int(gw.url.rsplit(":", 1)[1]), gw.pid, MODEL, path, config)
        ports = listener_ports(config)
        admin_url = f"http://127.0.0.1:{ports['admin']}" if "admin" in ports else gw.url
        try:
            before = await watch.lag_buckets(admin_url)
            seen, stop = watch.Observed(), asyncio.Event()
            tasks = [
                watch.sample_rss(gw.pid, seen, stop),
                watch.probe_health(target.port, seen, stop),
                watch.legit_load(gw.url, MODEL, seen, stop),
            ]
            listeners = {name: watch.Observed() for name in ports}
            tasks += [watch.probe_health(ports[name], listeners[name], stop) for name in listeners]
            if attack != BASELINE:
                tasks.append(ATTACKS[attack](target, stop))
            running = asyncio.gather(*tasks)
            await asyncio.sleep(seconds)
            stop.set()
            await running
            lag = watch.lag_summary(before, await watch.lag_buckets(admin_url))
            left = await watch.leftover(admin_url)
            alive = gw.alive()
            tracebacks = gw.stderr().count("Traceback")
        finally:
            gw.stop()
    return Row(attack, label, seen, listeners, lag, left, alive, tracebacks, target.counts)


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.1f}"


def percentiles(seen: watch.Observed | None) -> str:
    """/health P50 / P99 of one listener's prober, with its failures; `-` without one."""
    if seen is None:
        return "-"
    text = f"{ms(seen.health(0.5))} / {ms(seen.health(0.99))}"
    return text + (f" ({seen.probe_failures} failed)" if seen.probe_failures else "")


def table(rows: list[Row], seconds: float) -> str:
    lines = [
        f"Each attack {seconds:g} s; /health probed from a new connection every "
        f"{probe.PROBE_INTERVAL * 1000:g} ms (failed = no 200 within {probe.PROBE_TIMEOUT:g} s, counted "
        f"as {probe.PROBE_TIMEOUT:g} s); {watch.LEGIT_WORKERS} SDK clients in a closed loop alongside.",
        "",
        "| attack | gateway | RSS max (MB) | loop lag P99 / max (ms) | /health P50 / P99 (ms) "
        "| /health failed | /health on the admin port P50 / P99 (ms) "
        "| /health on the probe port P50 / P99 (ms) "
        "| requests ok / failed | in flight, queued after | tracebacks | attack |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lag = "n/a" if r.lag is None else f"{ms(r.lag[0])} / <= {ms(r.lag[1])}"
        left = "gone" if not r.alive else "n/a" if r.left is None else f"{r.left[0]}, {r.left[1]}"
        errors = ", ".join(f"{k}: {v}" for k, v in r.seen.errors.items())
        failed = f"{r.seen.failed}" + (f" ({errors})" if errors else "")
        others = " | ".join(percentiles(r.listeners.get(name)) for name in LISTENERS)
        lines.append(
            f"| {r.attack} | {r.gateway} | {r.seen.rss_max:,.0f} | {lag} "
            f"| {ms(r.seen.health(0.5))} / {ms(r.seen.health(0.99))} "
            f"| {r.seen.probe_failures} of {len(r.seen.probes)} | {others} "
            f"| {r.seen.ok:,} / {failed} | {left} "
            f"| {r.tracebacks} | {', '.join(f'{k} {v:,}' for k, v in r.counts.items())} |"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace, checkouts: list[tuple[str, Path]]) -> None:
    rows: list[Row] = []
    load = os.getloadavg()[0]
    with spawn_sim("--profile", MODEL, "--seed", "1") as a, spawn_sim("--profile", MODEL, "--seed", "2") as b:
        for attack in args.attacks:
            for run in range(args.repeat):
                for label, root in checkouts:
                    name = label if args.repeat == 1 else f"{label} #{run + 1}"
                    print(f"{attack}: {name} gateway ...", file=sys.stderr, flush=True)
                    rows.append(await run_attack(attack, name, root, [a, b], args.seconds))
    end = os.getloadavg()[0]
    report = [
        f"Load average (1 min) of the machine: {load:.1f} at the start, {end:.1f} at the end.",
        "",
        table(rows, args.seconds),
    ]
    if args.shutdown:
        report += ["", await shutdown_table(checkouts)]
    text = "\n".join(report)
    print(text)
    if args.docs is not None:
        write_block(args.docs, "bench-abuse", text)


def git_commit(root: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    return out.stdout.strip() or root.name


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=30.0, help="length of each attack")
    p.add_argument("--repeat", type=int, default=1, help="runs of each attack per checkout, interleaved")
    p.add_argument("--compare", metavar="PATH", help="another checkout of the gateway to run side by side")
    p.add_argument("--attacks", nargs="+", default=[BASELINE, *ATTACKS], choices=[BASELINE, *ATTACKS])
    p.add_argument("--no-shutdown", dest="shutdown", action="store_false", help="skip the SIGTERM run")
    p.add_argument("--docs", type=Path, help="also write the tables into this document's block")
    return p.parse_args()


if __name__ == "__main__":
    args = parse_args()
    compared = []
    if args.compare:
        root = Path(args.compare).resolve()
        compared = [(f"`{git_commit(root)}`", root)]
    asyncio.run(main(args, [("this checkout", ROOT), *compared]))
