"""The `sla` section's client-side parts: per-model targets and the queue's share of the budget.

A model's SLA is what its client sees: its TTFT and end-to-end targets include the wait in the
gateway's queue. `sla.models` gives a model its own targets (the entry replaces the default SLA for
that model: the keys it leaves out are not targets), so a large chat model and a small embedding
model behind one gateway keep their own. A tenant's `sla` (gateway.config.tenants) names targets of
its own that replace, signal by signal, those of the model its request is for (`merged`): a premium
class may want a tighter TTFT than the model's and keep its TPOT; a backend is held to the strictest
SLA of the traffic it may serve, tenants' included (`GatewayConfig.engine_sla`). `sla.queue_share`
(q) splits the TTFT and e2e budgets between the two places a request waits: the controller holds
each backend's engine-side P90 at (1 - q) x the target, and admission lets an interactive request
wait for what the engine leaves, at least q x the target (gateway.admission.budget). One fixed
share, not a measured one: an engine target that followed the measured queue wait would fall as the
queue filled, lower the limit, and so lengthen the queue further.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gateway.config.reader import ConfigReader
from gateway.types import SLA, Signal

SLA_KEYS = ("ttft_p90", "tpot_p90", "e2e_p90")
QUEUED_SIGNALS: tuple[Signal, ...] = ("ttft", "e2e")
"""Signals whose client-side value includes the wait in the gateway's queue."""
DEFAULT_QUEUE_SHARE = 0.25


def parse_sla_models(r: ConfigReader, raw: Mapping[str, Any]) -> dict[str, SLA]:
    """`sla.models`: model name -> its own targets (each entry a mapping of `SLA_KEYS`)."""
    models = raw.get("models", {})
    if models is None:
        return {}
    if not isinstance(models, Mapping):
        r.problems.append("sla.models: must be a mapping of model name to its targets")
        return {}
    out: dict[str, SLA] = {}
    for name, entry in models.items():
        if not isinstance(name, str) or not name:
            r.problems.append(f"sla.models: model names must be strings, got {name!r}")
            continue
        sla = parse_targets(r, entry, f"sla.models.{name}")
        if sla is not None:
            out[name] = sla
    return out


def parse_targets(r: ConfigReader, entry: object, where: str) -> SLA | None:
    """One mapping of `SLA_KEYS` at `where` (an `sla.models` entry, a tenant's `sla`): the targets it
    names, each positive seconds, at least one; None when it is not a mapping."""
    if not isinstance(entry, Mapping):
        r.problems.append(f"{where}: must be a mapping of targets ({', '.join(SLA_KEYS)})")
        return None
    path, found = f"{where}.", len(r.problems)
    r.unknown(entry, set(SLA_KEYS), path)
    sla = SLA(*(r.optional_seconds(entry, k, path) for k in SLA_KEYS))
    if not sla.targets() and len(r.problems) == found:  # else a bad key or value is the problem
        r.problems.append(f"{where}: names no target (give one of {', '.join(SLA_KEYS)})")
    return sla


def merged(base: SLA, override: SLA | None) -> SLA:
    """`base` with each target `override` names replaced by its own; the others stay `base`'s."""
    if override is None:
        return base
    return SLA(
        base.ttft_p90 if override.ttft_p90 is None else override.ttft_p90,
        base.tpot_p90 if override.tpot_p90 is None else override.tpot_p90,
        base.e2e_p90 if override.e2e_p90 is None else override.e2e_p90,
    )


def parse_queue_share(r: ConfigReader, raw: Mapping[str, Any]) -> float:
    share = r.number(raw, "queue_share", DEFAULT_QUEUE_SHARE, "sla.", maximum=0.9)
    return float(share)


def engine_sla(slas: Iterable[SLA], queue_share: float) -> SLA:
    """What the engine may take of the SLAs of the models one backend serves: per signal the
    strictest target, TTFT and e2e times (1 - q), TPOT whole (the queue adds nothing to it)."""
    best: dict[Signal, float] = {}
    for sla in slas:
        for signal, target in sla.targets().items():
            best[signal] = min(target, best.get(signal, target))
    keep = 1.0 - queue_share
    scaled = {s: (t * keep if s in QUEUED_SIGNALS else t) for s, t in best.items()}
    return SLA(scaled.get("ttft"), scaled.get("tpot"), scaled.get("e2e"))
