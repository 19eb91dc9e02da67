"""config/alerts.yml: promtool accepts it, its unit tests pass and pin every `for:`, and every alert
carries what the on-call person needs (severity, summary, description with values, runbook)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prom import ALERTS, PROMETHEUS_CONFIG, ROOT, tool
from promql import PROMETHEUS_SERIES, SERIES, metric_names, template_queries

HERE = Path(__file__).resolve().parent
UNIT_TESTS = sorted(HERE.glob("*.test.yml"))
RUNBOOKS = ROOT / "docs" / "runbooks.md"
RUNBOOK_BASE = "https://github.com/llm-gateway/llm-gateway/blob/main/docs/runbooks.md#"
ALERT_NAMES = {
    "GatewayCapacityExhausted",
    "GatewayShedding",
    "GatewaySLABreach",
    "GatewaySLOBurnRate",
    "GatewayBackendDown",
    "GatewayNoHealthyBackends",
    "GatewayKVCacheSaturated",
    "GatewayLimitAtFloor",
    "GatewaySLAInfeasible",
    "GatewayDown",
    "GatewayCoordinationLost",
}


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for group in doc["groups"] for r in group["rules"]]


def promtool(*args: str, cwd: Path = HERE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool("promtool")), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERT_NAMES)} rules found" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", *(p.name for p in UNIT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(UNIT_TESTS)


def test_promtool_check_config() -> None:
    result = promtool("check", "config", str(PROMETHEUS_CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERT_NAMES)} rules found" in result.stdout


def test_prometheus_config_scrapes_gateway_and_backends_and_loads_rules() -> None:
    cfg = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    assert [(PROMETHEUS_CONFIG.parent / f).resolve() for f in cfg["rule_files"]] == [ALERTS]
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    gateway = [t for c in jobs["llm-gateway"]["static_configs"] for t in c["targets"]]
    assert gateway == ["localhost:8080"]
    backends = [t for c in jobs["vllm"]["static_configs"] for t in c["targets"]]
    assert backends
    assert all(j.get("metrics_path", "/metrics") == "/metrics" for j in jobs.values())


def test_every_alert_has_severity_for_and_annotations() -> None:
    found = rules()
    assert {r["alert"] for r in found} == ALERT_NAMES
    assert len(found) == len(ALERT_NAMES)
    for rule in found:
        name = rule["alert"]
        assert re.fullmatch(r"\d+m", rule.get("for", "")), f"{name}: `for:` in whole minutes"
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        ann = rule["annotations"]
        assert set(ann) == {"summary", "description", "runbook_url"}, name
        assert "$labels." in ann["summary"], name
        # The description quotes the value that fired, or what the queries around it say.
        assert "$value" in ann["description"] or "query" in ann["description"], name
        assert ann["runbook_url"] == RUNBOOK_BASE + name.lower(), name


def test_outages_page_and_degradations_warn() -> None:
    severity = {r["alert"]: r["labels"]["severity"] for r in rules()}
    assert {n for n, s in severity.items() if s == "critical"} == {
        "GatewayShedding",
        "GatewaySLOBurnRate",
        "GatewayNoHealthyBackends",
        "GatewayDown",
    }


def github_anchor(heading: str) -> str:
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def test_every_runbook_url_points_at_a_runbook_section() -> None:
    text = RUNBOOKS.read_text()
    anchors = {github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}
    for rule in rules():
        anchor = rule["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor in anchors, f"{rule['alert']}: no section #{anchor} in {RUNBOOKS.name}"
        section = text.split(f"## {rule['alert']}\n", 1)[1].split("\n## ", 1)[0]
        for part in ("**Meaning.**", "**Confirm.**", "/admin/state", "PromQL"):
            assert part in section, f"{rule['alert']}: runbook section lacks {part}"
        assert re.search(r"\*\*Act[^*]*\*\*", section), f"{rule['alert']}: runbook lacks **Act**"


def test_rules_use_only_contract_metrics() -> None:
    for rule in rules():
        used = metric_names(rule["expr"])
        for text in rule["annotations"].values():
            for query in template_queries(text):
                used |= metric_names(query)
        assert used, rule["alert"]
        allowed = SERIES | PROMETHEUS_SERIES
        assert used <= allowed, f"{rule['alert']}: not in the contract: {used - allowed}"


def unit_cases() -> list[tuple[str, str, bool]]:
    """(test file, alert name, expects it firing) for every alert_rule_test."""
    cases = []
    for path in UNIT_TESTS:
        doc = yaml.safe_load(path.read_text())
        for test in doc["tests"]:
            for check in test.get("alert_rule_test", []):
                cases.append((path.name, check["alertname"], bool(check.get("exp_alerts"))))
    return cases


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    cases = unit_cases()
    for name in ALERT_NAMES:
        assert (name, True) in {(n, f) for _, n, f in cases}, f"{name} never tested firing"
        assert (name, False) in {(n, f) for _, n, f in cases}, f"{name} never tested silent"


def mutate_for(text: str, alert: str, delta_minutes: int) -> str:
    """The rules with `alert`'s `for:` moved by `delta_minutes`."""
    head, rest = text.split(f"- alert: {alert}\n", 1)
    match = re.search(r"^(\s*for: )(\d+)m$", rest, flags=re.MULTILINE)
    assert match is not None
    moved = f"{match.group(1)}{int(match.group(2)) + delta_minutes}m"
    return f"{head}- alert: {alert}\n{rest[: match.start()]}{moved}{rest[match.end() :]}"


@pytest.mark.parametrize("alert", sorted(ALERT_NAMES))
def test_unit_tests_pin_the_edge_of_for(alert: str, tmp_path: Path) -> None:
    """One minute more or less on any `for:` makes that alert's unit tests fail: they check the
    evaluation just before and just at the moment it starts firing."""
    files = sorted({f for f, n, _ in unit_cases() if n == alert})
    original = ALERTS.read_text()
    (tmp_path / "config").mkdir()
    test_dir = tmp_path / "tests" / "alerts"
    test_dir.mkdir(parents=True)
    for name in files:
        (test_dir / name).write_text((HERE / name).read_text())
    for delta in (-1, 1):
        (tmp_path / "config" / "alerts.yml").write_text(mutate_for(original, alert, delta))
        result = promtool("test", "rules", *files, cwd=test_dir)
        assert result.returncode != 0, f"{alert} for {delta:+d}m went unnoticed"
        assert f"alertname: {alert}" in result.stdout + result.stderr


# A threshold moved or an inequality made strict or loose must break some unit test.
THRESHOLD_MUTATIONS = [
    ("GatewayCapacityExhausted", ">= 0.5", "> 0.5"),
    ("GatewayCapacityExhausted", ">= 0.5", ">= 0.3"),
    ("GatewayShedding", ") > 0.05", ") >= 0.05"),
    ("GatewayShedding", "> 1 / 60", "> 1 / 240"),
    ("GatewaySLABreach", "> on (job, instance, backend, signal)", ">= on (job, instance, backend, signal)"),
    (
        "GatewaySLABreach",
        "> on (job, instance, backend, signal)\n            gateway_backend_target_seconds",
        "> on (job, instance, signal) group_left\n            gateway_sla_target_seconds",
    ),
    ("GatewaySLABreach", "quantile_over_time(0.5, ", "avg_over_time("),
    ("GatewayBackendDown", "gateway_backend_up == 0", "gateway_backend_up < 1.5"),
    ("GatewayNoHealthyBackends", "max by (job, instance)", "min by (job, instance)"),
    ("GatewayKVCacheSaturated", ">= 0.95", ">= 0.93"),
    ("GatewayKVCacheSaturated", ">= 0.95", ">= 0.98"),
    ("GatewayLimitAtFloor", "[5m])) >= 1", "[5m])) > 0"),
    ("GatewayLimitAtFloor", "gateway_concurrency_limit <= on", "gateway_concurrency_limit < on"),
    ("GatewayDown", 'up{job="llm-gateway"}', "up"),
    ("GatewayDown", "== 0", ">= 0"),
    ("GatewayCoordinationLost", "min_over_time(", "avg_over_time("),
    ("GatewayCoordinationLost", "[1m]) == 0", "[1m]) < 0"),
]


def mutate_expr(text: str, alert: str, old: str, new: str) -> str:
    head, rest = text.split(f"- alert: {alert}\n", 1)
    body, sep, tail = rest.partition("\n      - alert: ")
    assert body.count(old) == 1, f"{alert}: {old!r} not found once"
    return f"{head}- alert: {alert}\n{body.replace(old, new)}{sep}{tail}"


@pytest.mark.parametrize(("alert", "old", "new"), THRESHOLD_MUTATIONS)
def test_unit_tests_pin_thresholds(alert: str, old: str, new: str, tmp_path: Path) -> None:
    files = sorted({f for f, n, _ in unit_cases() if n == alert})
    (tmp_path / "config").mkdir()
    test_dir = tmp_path / "tests" / "alerts"
    test_dir.mkdir(parents=True)
    for name in files:
        (test_dir / name).write_text((HERE / name).read_text())
    mutated = mutate_expr(ALERTS.read_text(), alert, old, new)
    (tmp_path / "config" / "alerts.yml").write_text(mutated)
    assert promtool("check", "rules", str(tmp_path / "config" / "alerts.yml")).returncode == 0
    result = promtool("test", "rules", *files, cwd=test_dir)
    assert result.returncode != 0, f"{alert}: {old!r} -> {new!r} went unnoticed"
    assert f"alertname: {alert}" in result.stdout + result.stderr
