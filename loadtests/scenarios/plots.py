"""PNG plots of one run over time: limit and inflight, P90 against target, queue depth, KV usage."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loadtests.scenarios.analysis import BIN, MIN_BIN, admitted_at
from loadtests.scenarios.definitions import GATEWAY_SLA, SLA_TPOT, SLA_TTFT
from loadtests.scenarios.loadgen import Record
from loadtests.scenarios.runner import RunData
from loadtests.stats import p90


def _client_bins(
    data: RunData, attr: str, at: Callable[[Record], float] = admitted_at
) -> tuple[list[float], list[float]]:
    """P90 of `attr` over served requests in 2-second bins of `at` (default: when admitted)."""
    xs, ys = [], []
    t = 0.0
    while t < data.scenario.duration:
        served = [r for r in data.records if r.outcome == "ok" and t <= at(r) < t + BIN]
        value = p90(getattr(r, attr) for r in served) if len(served) >= MIN_BIN else None
        if value is not None:
            xs.append(t + BIN / 2)
            ys.append(value)
        t += BIN
    return xs, ys


def plot_run(data: RunData, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ticks = data.ticks
    xs = [t.at for t in ticks]
    n = max((len(t.backends) for t in ticks), default=0)
    fig, axes = plt.subplots(5, 1, figsize=(10, 13), sharex=True)
    ax_limit, ax_ttft, ax_tpot, ax_queue, ax_kv = axes
    for i in range(n):

        def series(attr: str, i: int = i) -> list[float | None]:
            out: list[float | None] = []
            for t in ticks:
                b = t.backends[i] if i < len(t.backends) else None
                out.append(getattr(b, attr) if b is not None else None)
            return out

        ax_limit.step(xs, series("limit"), where="post", label=f"b{i} limit")
        ax_limit.plot(xs, series("inflight"), alpha=0.6, label=f"b{i} inflight")
        ax_limit.plot(xs, series("running"), ":", alpha=0.6, label=f"b{i} running (vLLM)")
        gw_ttft = [b.p90.get("ttft") if i < len(t.backends) and (b := t.backends[i]) else None for t in ticks]
        gw_tpot = [b.p90.get("tpot") if i < len(t.backends) and (b := t.backends[i]) else None for t in ticks]
        ax_ttft.plot(xs, gw_ttft, ".", ms=3, alpha=0.6, label=f"b{i} gateway P90 (dispatch)")
        ax_tpot.plot(xs, gw_tpot, ".", ms=3, alpha=0.6, label=f"b{i} gateway P90")
        ax_kv.plot(xs, series("kv_usage"), label=f"b{i} KV usage")
    cx, cy = _client_bins(data, "attempt_ttft")
    ax_ttft.plot(cx, cy, "k-o", ms=3, label="client P90, admitted attempt (2 s bins)")
    cx, cy = _client_bins(data, "ttft", at=lambda r: r.arrival)
    ax_ttft.plot(cx, cy, "-", color="grey", lw=1, label="client P90 incl. retries (by arrival)")
    ax_ttft.axhline(SLA_TTFT, color="r", ls="--", label="client SLA")
    ax_ttft.axhline(float(GATEWAY_SLA["ttft_p90"]), color="orange", ls="--", label="gateway target")
    cx, cy = _client_bins(data, "tpot")
    ax_tpot.plot(cx, cy, "k-o", ms=3, label="client P90, admitted (2 s bins)")
    ax_tpot.axhline(SLA_TPOT, color="r", ls="--", label="SLA / target")
    ax_queue.plot(xs, [t.queue_depth for t in ticks], label="gateway queue depth")
    ax_limit.set_ylabel("requests")
    ax_ttft.set_ylabel("TTFT P90 (s)")
    ax_ttft.set_yscale("log")
    ax_tpot.set_ylabel("TPOT P90 (s)")
    ax_queue.set_ylabel("queued")
    ax_kv.set_ylabel("KV usage")
    ax_kv.set_ylim(0, 1.05)
    ax_kv.set_xlabel("seconds")
    for ax in axes:
        for at, label in data.event_times:
            ax.axvline(at, color="grey", ls=":")
            if ax is ax_limit:
                ax.annotate(label, (at, 1), xycoords=("data", "axes fraction"), fontsize=8, va="top")
        ax.legend(fontsize=7, loc="upper right", ncol=2)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{data.scenario.title}: {data.mode}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
