"""Pacing the collector: what exists at start is frozen, young collections come every `YOUNG`
allocations, and full passes wait ten times longer."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from gateway.server.gc_pacing import FULL_AFTER, YOUNG, pace_full_collections


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restore_gc")
def test_start_up_objects_are_frozen_and_full_passes_spaced() -> None:
    _, middle, _ = gc.get_threshold()
    kept = [object() for _ in range(10)], {"a": [1]}
    pace_full_collections()
    assert gc.get_freeze_count() >= len(gc.get_referents(kept))
    assert gc.get_threshold() == (YOUNG, middle, FULL_AFTER)
    assert not any(o is kept for o in gc.get_objects())  # out of the collector's view


class Node:
    other: object = None


def garbage_cycle() -> weakref.ref[Node]:
    """Two objects that refer to each other and to nothing else: only the collector frees them."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.mark.usefixtures("restore_gc")
def test_young_garbage_cycles_are_still_collected() -> None:
    pace_full_collections()
    gone = garbage_cycle()
    assert gc.collect(0) >= 2 and gone() is None  # a young cycle goes with the youngest generation


@pytest.mark.usefixtures("restore_gc")
def test_a_garbage_cycle_goes_without_an_explicit_collection_within_young_allocations() -> None:
    pace_full_collections()
    gone = garbage_cycle()
    held: list[dict[str, int]] = [{} for _ in range(2 * YOUNG)]  # a hundred-odd requests' allocations
    assert gone() is None and len(held) == 2 * YOUNG
