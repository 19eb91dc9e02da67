"""A tenant's own SLA targets, end to end: the real `openai` SDK -> gateway -> simulated vLLM on
loopback. A premium tenant whose TTFT target is tighter than its model's gets the smaller wait
budget (refused 429 `deadline` where a standard tenant's request waits for the slot), its requests
are judged met or missed against its own target, the backend is controlled to the strictest target
of the traffic it serves, and a reload that changes a tenant's targets takes effect."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from tests.procs import Proc, free_port, spawn, spawn_gateway, spawn_sim
from tests.proxy.test_client_sla_http import MODEL, chat, in_background, inflight, metric, wait_for

PREMIUM, STANDARD = "premium-key", "standard-key"


def tiered(sim: Proc, premium: dict[str, float] | None) -> dict[str, object]:
    """One slot; the model's TTFT target 20 s; `premium`'s own targets, a standard tenant's none."""
    tenant: dict[str, object] = {"name": "premium", "api_keys": [PREMIUM]}
    if premium is not None:
        tenant["sla"] = premium
    return {
        "backends": [{"url": sim.url, "name": "a"}],
        "controller": {"algorithm": "fixed", "params": {"limit": 1}},
        "sla": {"ttft_p90": 20.0},
        "tenants": [tenant, {"name": "standard", "api_keys": [STANDARD]}],
    }


def client(gw: Proc, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0)


def engine_ttft_target(gw: Proc) -> float:
    return float(httpx.get(f"{gw.url}/admin/state").json()["backends"][0]["sla"]["ttft"])


def depth(gw: Proc) -> int:
    models = httpx.get(f"{gw.url}/admin/state").json()["models"]
    return int(models.get(MODEL, {}).get("depth", 0))


@pytest.fixture
def slow_sim() -> Iterator[Proc]:
    """A simulated vLLM whose API server holds every request 1.5 s before its engine sees it."""
    with spawn_sim("--profile", "tiny-cpu", "--frontend-delay", "1.5") as sim:
        yield sim


def premium_refused_while_standard_waits(gw: Proc) -> openai.RateLimitError:
    """A standard request takes the only slot and another waits for it; a premium request then
    arriving is refused once its budget runs out. Every standard request is served."""
    standard = client(gw, STANDARD)
    with in_background(lambda: chat(standard)) as first:
        wait_for(lambda: inflight(gw) == 1, "the first request to take the only slot")
        with in_background(lambda: chat(standard)) as second:
            wait_for(lambda: depth(gw) == 1, "the second standard request to wait")
            with pytest.raises(openai.RateLimitError) as refused:
                chat(client(gw, PREMIUM))
    assert isinstance(first[0], str) and isinstance(second[0], str), (first, second)
    return refused.value


def test_a_premium_tenants_tighter_target_gives_it_the_smaller_wait_budget(slow_sim: Proc) -> None:
    with spawn_gateway(tiered(slow_sim, {"ttft_p90": 0.4})) as gw:
        # The backend serves premium traffic too: its engine target is 0.4 s less the queue's 25 %.
        assert engine_ttft_target(gw) == pytest.approx(0.3)
        err = premium_refused_while_standard_waits(gw)
        assert err.status_code == 429 and err.code == "deadline" and "budget" in err.message
        counts = {
            r: metric(gw.url, "gateway_sla_requests_total", model=MODEL, result=r)
            for r in ("met", "missed", "refused")
        }
        # Both standard requests met 20 s (the second's 1.5 s wait included); premium was refused.
        assert counts == {"met": 2, "missed": 0, "refused": 1}


def test_a_tenants_requests_are_judged_against_its_own_target(slow_sim: Proc) -> None:
    with spawn_gateway(tiered(slow_sim, {"ttft_p90": 0.4})) as gw:
        assert chat(client(gw, PREMIUM)) and chat(client(gw, STANDARD))
        # Each took 1.5 s in the front end: over premium's 0.4 s, within the model's 20 s.
        assert metric(gw.url, "gateway_sla_requests_total", model=MODEL, result="missed") == 1
        assert metric(gw.url, "gateway_sla_requests_total", model=MODEL, result="met") == 1
        # The model's own target is what the target gauge shows.
        assert metric(gw.url, "gateway_client_sla_target_seconds", model=MODEL, signal="ttft") == 20.0


def test_a_reload_that_gives_a_tenant_a_target_moves_its_budget_and_the_engine_target(
    slow_sim: Proc, tmp_path: Path
) -> None:
    port = free_port()
    path = tmp_path / "gateway.yaml"
    listen = {"listen": {"host": "127.0.0.1", "port": port}}
    path.write_text(yaml.safe_dump({**tiered(slow_sim, None), **listen}))
    cmd = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--log-level", "warning"]
    url = f"http://127.0.0.1:{port}"
    with spawn(cmd, f"{url}/admin/state", base_url=url) as gw:
        assert engine_ttft_target(gw) == pytest.approx(15.0)
        path.write_text(yaml.safe_dump({**tiered(slow_sim, {"ttft_p90": 0.4}), **listen}))
        answer = httpx.post(f"{url}/admin/reload")
        assert answer.status_code == 200, answer.text
        assert engine_ttft_target(gw) == pytest.approx(0.3)
        err = premium_refused_while_standard_waits(gw)
        assert err.code == "deadline"
