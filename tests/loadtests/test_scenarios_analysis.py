"""The scenario summary's arithmetic on records made up for the purpose."""

from __future__ import annotations

from loadtests.scenarios.analysis import summarize
from loadtests.scenarios.definitions import STANDARD, Scenario, Stream
from loadtests.scenarios.loadgen import Record
from loadtests.scenarios.runner import RunData


def served(tenant: str, at: float) -> Record:
    return Record(tenant, arrival=at, outcome="ok", ttft=0.5, attempt_at=at, attempt_ttft=0.5, tpot=0.02)


def test_tenant_shares_count_what_was_admitted_while_the_load_ran() -> None:
    scenario = Scenario("f", "f", 10.0, (Stream(STANDARD),))
    records = [served("flood", 1.0 + i / 10) for i in range(5)] + [served("light", 2.0 + i) for i in range(5)]
    # After the load stops at 10 s only the flood's retries are left; they take the idle capacity.
    records += [served("flood", 11.0 + i / 10) for i in range(10)]
    row = summarize(RunData(scenario, "sla", records, []))
    tenants = row["tenants"]
    assert tenants["flood"]["served"] == 15 and tenants["light"]["served"] == 5
    assert tenants["flood"]["served_share"] == 0.5 and tenants["light"]["served_share"] == 0.5
