"""LocalSlots: the in-process SlotBackend, the behaviour without shared state."""

from __future__ import annotations

import pytest

from gateway.coordination.slots import LocalSlots, SlotBackend


async def test_local_slots_count_per_backend_and_release_exactly_once() -> None:
    slots: SlotBackend = LocalSlots()
    granted = [await slots.try_acquire("b", "t", 2) for _ in range(3)]
    assert [g is not None for g in granted] == [True, True, False]
    assert await slots.try_acquire("c", "t", 1) is not None
    first = granted[0]
    assert first is not None
    await slots.release(first)
    assert slots.held("b") == 1
    assert await slots.try_acquire("b", "t", 2) is not None
    with pytest.raises(RuntimeError, match="released twice"):
        await slots.release(first)
