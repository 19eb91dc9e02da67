"""The admin surface: /admin/* needs the admin key when one is configured, /metrics and /admin/*
can live on a listener of their own, and a wrong method gets 405 with `Allow` on every route."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.procs import Proc, free_port, spawn_gateway, spawn_sim

KEY = "admin-secret"
ROUTES = {
    "/v1/chat/completions": "POST",
    "/v1/completions": "POST",
    "/v1/embeddings": "POST",
    "/v1/models": "GET, HEAD",
    "/health": "GET, HEAD",
    "/metrics": "GET, HEAD",
    "/admin/state": "GET, HEAD",
    "/admin/reload": "POST",
}


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    with spawn_sim("--profile", "tiny-cpu") as proc:
        yield proc


@pytest.fixture(scope="module")
def keyed(sim: Proc) -> Iterator[Proc]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TEST_GATEWAY_ADMIN_KEY", KEY)  # inherited by the gateway process
        config = {
            "backends": [sim.url],
            "admin": {"api_key_env": "TEST_GATEWAY_ADMIN_KEY"},
            "tenants": [{"name": "team", "api_keys": ["team-key"]}],
        }
        with spawn_gateway(config, ready="/v1/models") as proc:
            yield proc


def test_admin_routes_need_the_admin_key(keyed: Proc) -> None:
    for auth in (None, "Bearer team-key", "Bearer wrong", KEY):
        headers = {"authorization": auth} if auth else {}
        answer = httpx.get(f"{keyed.url}/admin/state", headers=headers)
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key"
    assert httpx.post(f"{keyed.url}/admin/reload").status_code == 401
    state = httpx.get(f"{keyed.url}/admin/state", headers={"authorization": f"Bearer {KEY}"})
    assert state.status_code == 200 and state.json()["backends"][0]["inflight"] == 0
    assert httpx.get(f"{keyed.url}/metrics").status_code == 200  # for the scraper, or a separate port


@pytest.mark.parametrize("path", list(ROUTES))
def test_a_wrong_method_is_405_with_allow_on_every_route(keyed: Proc, path: str) -> None:
    method = "DELETE" if ROUTES[path] != "POST" else "GET"
    answer = httpx.request(method, f"{keyed.url}{path}")
    assert answer.status_code == 405
    assert answer.headers["allow"] == ROUTES[path]
    assert answer.json()["error"]["code"] == "method_not_allowed"


def test_metrics_and_admin_can_have_their_own_listener(sim: Proc) -> None:
    admin_port = free_port()
    config = {"backends": [sim.url], "admin": {"host": "127.0.0.1", "port": admin_port}}
    with spawn_gateway(config, ready="/v1/models") as gw:
        admin = f"http://127.0.0.1:{admin_port}"
        for path in ("/metrics", "/admin/state"):
            assert httpx.get(f"{gw.url}{path}").status_code == 404
            assert httpx.get(f"{admin}{path}").status_code == 200
        assert httpx.get(f"{admin}/v1/models").status_code == 404
        assert httpx.get(f"{gw.url}/health").status_code == httpx.get(f"{admin}/health").status_code == 200


def test_probes_have_a_port_of_their_own_answered_off_the_event_loop(sim: Proc) -> None:
    probe_port = free_port()
    config = {"backends": [sim.url], "admin": {"host": "127.0.0.1", "probe_port": probe_port}}
    with spawn_gateway(config, ready="/v1/models") as gw:
        probe = f"http://127.0.0.1:{probe_port}"
        assert httpx.get(f"{probe}/health").json() == httpx.get(f"{gw.url}/health").json()
        assert httpx.get(f"{probe}/live").json() == {"status": "ok"}
        assert httpx.get(f"{probe}/v1/models").status_code == 404
        assert httpx.get(f"{gw.url}/live").status_code == 404  # only the probe port has it
