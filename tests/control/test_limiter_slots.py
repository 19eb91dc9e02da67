from __future__ import annotations

import pytest
from limiter_helpers import Progress

from gateway.control.slots import InFlight, Slot
from gateway.types import Sample, StreamProgress


class Events:
    """Records what slots report, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[object, ...]] = []

    def sent(
        self, slot: Slot, dispatched_at: float, progress: StreamProgress | None, most_tokens: int | None
    ) -> None:
        self.log.append(("sent", slot, dispatched_at, progress is not None))

    def first_token(self, dispatched_at: float, ttft: float) -> None:
        self.log.append(("first", dispatched_at, ttft))

    def finished(self, slot: Slot, sample: Sample | None) -> None:
        self.log.append(("finished", slot, sample))


def inflight(limit: int = 8) -> tuple[InFlight, Events]:
    events = Events()
    return InFlight(limit, events), events


def test_acquire_until_full_then_refuse() -> None:
    slots, _ = inflight(8)
    held = [slots.acquire() for _ in range(8)]
    assert slots.count == 8 and slots.peak == 8 and not slots.has_room()
    with pytest.raises(RuntimeError, match="no room"):
        slots.acquire()
    held[0].release(None)
    assert slots.has_room() and slots.count == 7


def test_release_exactly_once() -> None:
    slots, events = inflight()
    slot = slots.acquire()
    slot.release(None)
    assert slot.released
    with pytest.raises(RuntimeError, match="twice"):
        slot.release(None)
    assert slots.count == 0
    assert events.log == [("finished", slot, None)]


def test_a_cut_below_the_count_leaves_no_room_until_enough_releases() -> None:
    slots, _ = inflight(8)
    held = [slots.acquire() for _ in range(7)]
    slots.set_limit(4)  # a cut while 7 are in flight
    for s in held[:3]:
        s.release(None)
    assert not slots.has_room() and slots.count == 4
    held[3].release(None)
    assert slots.has_room()
    slots.set_limit(6)
    assert slots.limit == 6 and slots.count == 3


def test_peak_is_the_highest_count_since_the_reset() -> None:
    slots, _ = inflight(8)
    held = [slots.acquire() for _ in range(5)]
    for s in held[:4]:
        s.release(None)
    assert (slots.count, slots.peak) == (1, 5)
    slots.reset_peak()
    assert slots.peak == 1


def test_a_slot_reports_its_stream_first_token_and_end_then_nothing() -> None:
    slots, events = inflight()
    slot = slots.acquire()
    slot.sent(100.0, Progress())
    slot.first_token(100.0, 0.3)
    slot.first_token(100.0, 0.4)  # only the first one counts
    slot.release(Sample(dispatched_at=100.0, e2e=2.0, ttft=0.3, output_tokens=50))
    slot.sent(100.0, Progress())
    slot.first_token(100.0, 0.5)
    assert events.log == [
        ("sent", slot, 100.0, True),
        ("first", 100.0, 0.3),
        # The TTFT was reported at the first token: the finished sample does not repeat it.
        ("finished", slot, Sample(dispatched_at=100.0, e2e=2.0, ttft=None, output_tokens=50)),
    ]


def test_a_sample_keeps_its_ttft_when_no_first_token_was_reported() -> None:
    slots, events = inflight()
    slot = slots.acquire()
    sample = Sample(dispatched_at=100.0, e2e=2.0, ttft=0.3)
    slot.release(sample)
    assert events.log == [("finished", slot, sample)]


def test_the_count_goes_down_even_if_recording_the_end_fails() -> None:
    class Failing(Events):
        def finished(self, slot: Slot, sample: Sample | None) -> None:
            raise ValueError("broken receiver")

    slots = InFlight(1, Failing())
    slot = slots.acquire()
    with pytest.raises(ValueError, match="broken receiver"):
        slot.release(None)
    assert slot.released and slots.count == 0 and slots.has_room()


def test_a_request_of_n_sequences_counts_n_up_to_the_limit() -> None:
    slots, _ = inflight(8)
    three = slots.acquire(3)
    assert slots.count == 3 and slots.has_room()
    many = slots.acquire(50)  # admitted with one slot free; counted as at most the limit
    assert slots.count == 11 and not slots.has_room()
    many.release(None)
    three.release(None)
    assert slots.count == 0 and slots.peak == 11
