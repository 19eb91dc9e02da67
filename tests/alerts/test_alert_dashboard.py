"""config/grafana: the dashboard is valid JSON, shows what an operator needs per backend, asks only
for metrics the gateway exports, and every query parses in a real Prometheus."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prom import ROOT, StartPrometheus, minimal_config
from promql import SERIES, metric_names

from gateway.metrics import Metrics

GRAFANA = ROOT / "config" / "grafana"
DASHBOARD = GRAFANA / "llm-gateway.json"


def dashboard() -> dict[str, Any]:
    doc = json.loads(DASHBOARD.read_text())
    assert isinstance(doc, dict)
    return doc


def panels() -> list[dict[str, Any]]:
    out = []
    for panel in dashboard()["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def exprs() -> list[str]:
    return [t["expr"] for p in panels() for t in p.get("targets", [])]


def variable_queries() -> list[str]:
    found = []
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
            assert match, query
            found.append(match.group(1))
    return found


def test_dashboard_is_valid_json_with_unique_ids_and_a_templated_datasource() -> None:
    doc = dashboard()
    assert doc["uid"] == "llm-gateway"
    ids = [p["id"] for p in panels()]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in doc["templating"]["list"]} == {
        "datasource", "instance", "backend", "model",
    }  # fmt: skip
    for panel in panels():
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]


def test_every_query_uses_only_contract_metrics() -> None:
    queries = exprs() + variable_queries()
    assert len(queries) >= 15
    for expr in queries:
        used = metric_names(expr)
        assert used, expr
        assert used <= SERIES, f"not in the contract: {used - SERIES} in {expr}"


def panel_metrics(panel: dict[str, Any]) -> set[str]:
    return {m for t in panel.get("targets", []) for m in metric_names(t["expr"])}


def test_per_backend_panels_show_limit_against_inflight_and_p90_against_target() -> None:
    repeated = [p for p in panels() if p.get("repeat") == "backend"]
    shown = [panel_metrics(p) for p in repeated]
    assert {
        "gateway_concurrency_limit",
        "gateway_inflight_requests",
        "gateway_concurrency_ceiling",
        "gateway_concurrency_floor",
    } in shown
    assert {"gateway_latency_p90_seconds", "gateway_backend_target_seconds"} in shown
    for panel in repeated:
        for target in panel["targets"]:
            if "backend" in target["expr"]:
                assert 'backend="$backend"' in target["expr"]


def test_dashboard_shows_queue_shedding_kv_and_health() -> None:
    all_exprs = " ".join(exprs())
    for metric in (
        "gateway_queue_depth",
        "gateway_rejected_requests_total",
        "gateway_backend_kv_cache_usage_ratio",
        "gateway_backend_up",
        "gateway_capacity_exhausted",
        "gateway_backend_waiting_requests",
    ):
        assert metric in all_exprs, metric
    assert re.search(r"sum by \([^)]*reason[^)]*\) \(rate\(gateway_rejected_requests_total", all_exprs)


def test_gateway_exports_every_contract_metric() -> None:
    """The contract the rules and the dashboard rely on is what gateway.metrics registers."""
    text = Metrics(coordination=True).render().decode()
    families = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE))
    exported = set()
    for name, kind in families.items():
        if kind == "histogram":
            exported |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            exported.add(name)
    assert exported >= SERIES, f"missing from gateway.metrics: {SERIES - exported}"


def grafana_to_promql(expr: str) -> str:
    """What Grafana sends for one panel query with every variable set to All."""
    expr = expr.replace("$__rate_interval", "1m")
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def test_every_query_parses_in_prometheus(prometheus_server: StartPrometheus) -> None:
    prom = prometheus_server(minimal_config())
    for expr in exprs() + variable_queries():
        prom.query(grafana_to_promql(expr))  # raises on a 400 with the parse error


def test_provisioning_points_at_prometheus_and_the_dashboard() -> None:
    prov = GRAFANA / "provisioning"
    sources = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://localhost:9090"
    boards = yaml.safe_load((prov / "dashboards" / "llm-gateway.yml").read_text())
    (provider,) = boards["providers"]
    path = provider["options"]["path"].replace("${GF_PATHS_PROVISIONING}", str(prov))
    assert DASHBOARD in Path(path).resolve().glob("*.json")


@pytest.mark.parametrize("bad", ["rate(gateway_requests_total[5m]", "up{job=}"])
def test_a_broken_query_is_reported(prometheus_server: StartPrometheus, bad: str) -> None:
    prom = prometheus_server(minimal_config())
    with pytest.raises(AssertionError, match="bad_data"):
        prom.query(bad)
