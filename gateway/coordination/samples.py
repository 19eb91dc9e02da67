"""The evidence of every process, gathered for the backend's leader: a Redis stream per backend.

A process that does not lead a backend appends, once per control tick, what its requests to that
backend showed since the last time: the finished requests' samples, its requests waiting for the
backend and its in-flight count (one XADD, trimmed to about `max_entries`). The leader reads the
entries past the last one it read (XREAD without blocking) and feeds them to its limiter, so one
controller decides from all the traffic, not from its own 1/N of it.

Why a stream: entries are ordered and kept after reading, so a new leader starts from the entries
of the last few seconds (`start_at` the newest minus `replay_ms`) instead of from nothing, and a
reader that falls behind misses only what trimming dropped.

Sample fields travel as a compact JSON list; `dispatched_at` is a clock reading of the writer and
is replaced on reading by the reader's clock minus the sample's age (as shared.py does for engine stats).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis

from gateway.coordination.scripts import Keys
from gateway.types import Clock, Sample

if TYPE_CHECKING:
    _Encodable = bytes | bytearray | memoryview[int] | str | int | float
    """What redis-py's stream commands accept as a field or a value."""


@dataclass(frozen=True, slots=True)
class Report:
    """One process's entry: what it saw of the backend since its previous one."""

    owner: str
    samples: list[Sample]
    queued: int
    inflight: int


def encode(samples: list[Sample], now: float) -> str:
    rows = [
        [
            round(now - s.dispatched_at, 4),
            round(s.e2e, 5),
            s.ttft,
            s.tpot,
            s.output_tokens,
            s.prompt_tokens,
        ]
        for s in samples
        if s.ok
    ]
    return json.dumps(rows, separators=(",", ":"))


def decode(text: str, now: float) -> list[Sample]:
    return [
        Sample(
            dispatched_at=now - age,
            e2e=e2e,
            ttft=ttft,
            tpot=tpot,
            output_tokens=int(out),
            prompt_tokens=int(prompt),
        )
        for age, e2e, ttft, tpot, out, prompt in json.loads(text)
    ]


class SampleStream:
    def __init__(
        self, redis: Redis, *, keys: Keys | None = None, clock: Clock, max_entries: int = 2000
    ) -> None:
        self._redis = redis
        self._keys = keys or Keys()
        self._clock = clock
        self._max = max_entries
        self._last: dict[str, str] = {}

    async def append(
        self, backend: str, owner: str, samples: list[Sample], queued: int, inflight: int
    ) -> None:
        fields: dict[_Encodable, _Encodable] = {
            "owner": owner,
            "samples": encode(samples, self._clock()),
            "queued": queued,
            "inflight": inflight,
        }
        await self._redis.xadd(self._keys.samples(backend), fields, maxlen=self._max, approximate=True)

    def forget(self, backend: str) -> None:
        """Lost the seat: the next read as leader starts again from recent entries."""
        self._last.pop(backend, None)

    async def read(self, backend: str, *, replay_ms: int = 5000) -> list[Report]:
        """The entries since the previous read (a first read starts `replay_ms` back)."""
        key = self._keys.samples(backend)
        since = self._last.get(backend)
        if since is None:
            seconds, micros = await self._redis.time()
            since = f"{max(0, seconds * 1000 + micros // 1000 - replay_ms)}-0"
        got: Any = await self._redis.xread({key: since}, count=10_000)
        reports: list[Report] = []
        now = self._clock()
        for _stream, entries in got:
            for entry_id, fields in entries:
                since = entry_id
                reports.append(
                    Report(
                        owner=fields["owner"],
                        samples=decode(fields["samples"], now),
                        queued=int(fields["queued"]),
                        inflight=int(fields["inflight"]),
                    )
                )
        self._last[backend] = since
        return reports
