"""ClientSLA: each interactive request judged once against its model's SLA as its client saw it,
and the client TTFT P90 over the last minute, as /metrics exports them."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gateway.metrics.client_sla import WINDOW_SECONDS, ClientSLA
from gateway.types import SLA
from tests.clock import FakeClock

SLA_1S = SLA(ttft_p90=1.0, tpot_p90=0.05)


def judge(
    sla: ClientSLA,
    clock: FakeClock,
    *,
    waited: float,
    ttft: float | None,
    status: int = 200,
    refused: bool = False,
    tpot: float = 0.01,
) -> None:
    """A request that waited `waited` in the queue and got its first token `ttft` after dispatch."""
    arrived = clock.now
    clock.advance(waited + (ttft or 0.0))
    first = None if ttft is None else clock.now
    clock.advance(1.0)
    sla.judge("m", SLA_1S, status=status, refused=refused, arrived=arrived, first_token_at=first, tpot=tpot)


def exposition(sla: ClientSLA) -> str:
    registry = CollectorRegistry()
    registry.register(sla)
    return generate_latest(registry).decode()


def test_the_queue_wait_counts_and_each_result_is_counted_once() -> None:
    clock = FakeClock(100.0)
    sla = ClientSLA(clock)
    judge(sla, clock, waited=0.0, ttft=0.4)  # met
    judge(sla, clock, waited=0.7, ttft=0.4)  # 1.1 s as the client saw it: missed
    judge(sla, clock, waited=0.0, ttft=0.2, tpot=0.08)  # TPOT over: missed
    judge(sla, clock, waited=0.0, ttft=None, status=200)  # a whole answer: no TTFT to judge, met
    judge(sla, clock, waited=0.2, ttft=None, status=502)  # failed: missed
    judge(sla, clock, waited=0.5, ttft=None, status=429, refused=True)
    text = exposition(sla)
    assert 'gateway_sla_requests_total{model="m",result="met"} 2.0' in text
    assert 'gateway_sla_requests_total{model="m",result="missed"} 3.0' in text
    assert 'gateway_sla_requests_total{model="m",result="refused"} 1.0' in text
    assert 'gateway_client_sla_target_seconds{model="m",signal="ttft"} 1.0' in text
    # The P90 of the three TTFTs the clients saw (0.4, 1.1, 0.2), nearest rank: the largest.
    assert sla.p90("m") == pytest.approx(1.1)
    assert 'gateway_client_ttft_p90_seconds{model="m"}' in text


def test_the_p90_forgets_what_is_older_than_the_window() -> None:
    clock = FakeClock(100.0)
    sla = ClientSLA(clock)
    judge(sla, clock, waited=2.0, ttft=0.5)
    clock.advance(WINDOW_SECONDS + 1)
    assert sla.p90("m") is None
    assert "gateway_client_ttft_p90_seconds{" not in exposition(sla)
    judge(sla, clock, waited=0.0, ttft=0.3)
    assert sla.p90("m") == pytest.approx(0.3)
