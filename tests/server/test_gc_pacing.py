"""Pacing the collector: what exists at start is frozen, and full passes wait ten times longer."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.server.gc_pacing import FULL_AFTER, pace_full_collections


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restore_gc")
def test_start_up_objects_are_frozen_and_full_passes_spaced() -> None:
    young, middle, _ = gc.get_threshold()
    kept = [object() for _ in range(10)], {"a": [1]}
    pace_full_collections()
    assert gc.get_freeze_count() >= len(gc.get_referents(kept))
    assert gc.get_threshold() == (young, middle, FULL_AFTER)
    assert not any(o is kept for o in gc.get_objects())  # out of the collector's view


@pytest.mark.usefixtures("restore_gc")
def test_young_garbage_cycles_are_still_collected() -> None:
    pace_full_collections()

    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    assert gc.collect(0) >= 2  # a young cycle goes with the youngest generation
