"""The leader's view of every process's traffic: reports appended to a real Redis stream and read
back once each, with their samples' ages kept across clocks."""

from __future__ import annotations

from redis.asyncio import Redis

from gateway.coordination.samples import SampleStream, decode, encode
from gateway.coordination.scripts import Keys
from gateway.types import Sample
from tests.clock import FakeClock


def test_samples_keep_their_age_not_the_writers_clock() -> None:
    sample = Sample(dispatched_at=100.0, e2e=2.5, ttft=0.25, tpot=0.01, output_tokens=40, prompt_tokens=7)
    failed = Sample(dispatched_at=100.0, e2e=1.0, ok=False)
    (back,) = decode(encode([sample, failed], now=103.0), now=5003.0)
    assert back == Sample(
        dispatched_at=5000.0, e2e=2.5, ttft=0.25, tpot=0.01, output_tokens=40, prompt_tokens=7
    )


async def test_a_leader_reads_each_report_once(redis: Redis, keys: Keys) -> None:
    clock = FakeClock(50.0)
    follower = SampleStream(redis, keys=keys, clock=clock)
    leader = SampleStream(redis, keys=keys, clock=clock)
    one = Sample(dispatched_at=49.0, e2e=1.0, output_tokens=3)
    await follower.append("b", "p2", [one], queued=4, inflight=2)
    (report,) = await leader.read("b")
    assert (report.owner, report.queued, report.inflight, report.samples) == ("p2", 4, 2, [one])
    assert await leader.read("b") == []
    await follower.append("b", "p3", [], queued=0, inflight=1)
    assert [r.owner for r in await leader.read("b")] == ["p3"]
    leader.forget("b")  # lost the seat: a new term replays the recent entries
    assert [r.owner for r in await leader.read("b")] == ["p2", "p3"]
