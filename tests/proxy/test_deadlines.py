"""gateway.proxy.deadlines: one sweep fires the exchanges' deadlines, each within its resolution."""

from __future__ import annotations

import asyncio

import pytest

from gateway.proxy.deadlines import GRANULARITY, STEPS, Deadlines


def test_the_resolution_is_a_share_of_the_shortest_timeout_never_under_a_millisecond() -> None:
    deadlines = Deadlines(60.0)
    assert deadlines.resolution == pytest.approx(60.0 / STEPS)
    deadlines.fit(0.01)
    assert deadlines.resolution == GRANULARITY


async def _run_until(deadlines: Deadlines, seconds: float, moves: int = 0, every: float = 0.0) -> float:
    """Run one exchange under a deadline `seconds` away, moved `moves` times every `every` seconds;
    the loop time it took to end by TimeoutError."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as timeout:
            deadlines.set(timeout, loop.time() + seconds)
            try:
                for _ in range(moves):
                    await asyncio.sleep(every)
                    deadlines.set(timeout, loop.time() + seconds)
                await asyncio.sleep(3600)
            finally:
                deadlines.discard(timeout)
    return loop.time() - start


async def test_a_deadline_fires_past_due_within_one_resolution_and_ends_only_its_exchange() -> None:
    deadlines = Deadlines(0.2)
    other = asyncio.create_task(asyncio.sleep(0.5))
    took = await _run_until(deadlines, 0.2)
    assert 0.2 <= took <= 0.2 + deadlines.resolution + 0.05
    assert not other.done()
    await other


async def test_moving_a_deadline_keeps_its_exchange_running() -> None:
    deadlines = Deadlines(0.1)
    took = await _run_until(deadlines, 0.1, moves=5, every=0.05)
    assert took >= 5 * 0.05 + 0.1


async def test_no_sweep_runs_while_no_exchange_does() -> None:
    deadlines = Deadlines(0.05)
    async with asyncio.timeout(None) as timeout:
        deadlines.set(timeout, asyncio.get_running_loop().time() + 0.05)
        await asyncio.sleep(0)  # the exchange ends well before its deadline
        deadlines.discard(timeout)
    await asyncio.sleep(0.05)  # the armed sweep runs once, finds nothing and stops
    assert deadlines._sweep is None and len(deadlines) == 0


async def test_fire_all_ends_every_exchange_now() -> None:
    deadlines = Deadlines(300.0)
    runs = [asyncio.create_task(_run_until(deadlines, 300.0)) for _ in range(3)]
    await asyncio.sleep(0.01)
    deadlines.fire_all()
    took = await asyncio.gather(*runs)
    assert max(took) < 1.0
    deadlines.close()


async def test_a_deadline_moved_after_it_fired_does_not_stop_the_sweeps() -> None:
    deadlines = Deadlines(0.05)
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as timeout:
            deadlines.set(timeout, loop.time())
            deadlines.fire_all()
            deadlines.set(timeout, loop.time())  # a chunk came before the cancel landed
            await asyncio.sleep(3600)
    await asyncio.sleep(0.1)  # the sweep meets the fired deadline and must not raise
    deadlines.discard(timeout)
    async with asyncio.timeout(2.0):  # the next deadline still fires
        await _run_until(deadlines, 0.05)
