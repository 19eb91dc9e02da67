"""The benchmarks' measuring HTTP/1.1 client: one keep-alive connection per user, raw asyncio streams.

A benchmark's client must not be what limits it: hundreds of users reading thousands of SSE chunks
a second through an HTTP library that parses every chunk would need more CPU than the gateway or
the simulator it measures. So a request is written by hand, the response read in blocks as they
arrive, and nothing is parsed but the status line, the headers, and a search of each block for the
marker of a chunk carrying text (its first sighting is the time to first token; with `stamps`, every
sighting's arrival is kept, for inter-token gaps) and for the end of the chunked body. JSON chunk
bodies (`{"...": ...}`) cannot contain the chunked terminator, a bare CRLF "0" CRLF CRLF. A body
sent with a content-length (a non-streamed answer) is kept whole in `Answer.body`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_END = b"\r\n0\r\n\r\n"
TEXT = b'"text":'
"""The marker of a completions chunk carrying text (one token a chunk from vLLM and the simulator)."""


@dataclass(slots=True)
class Answer:
    sent: float
    ended: float
    status: int
    first: float | None = None
    """When the first chunk carrying output text arrived (streamed 200 answers)."""
    stamps: list[float] = field(default_factory=list)
    """With `stamps=True`: when each sighting of the marker arrived (one a token)."""
    body: bytes = b""
    """A non-streamed body."""
    backend: str = ""


class Connection:
    """One user's keep-alive connection to the gateway."""

    def __init__(self, host: str, port: int) -> None:
        self._host = host
        self._port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    @classmethod
    def to(cls, url: str) -> Connection:
        parts = urlsplit(url)
        return cls(parts.hostname or "127.0.0.1", parts.port or 80)

    async def connect(self) -> None:
        """Open the connection now (else the first `post` opens it)."""
        if self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)

    async def post(
        self,
        path: str,
        body: bytes,
        marker: bytes = TEXT,
        *,
        stamps: bool = False,
        into: list[float] | None = None,
    ) -> Answer:
        """POST `body`; with `stamps`, every marker's arrival is appended to `into` as it comes (a
        caller that cancels a long stream keeps what arrived) or else to the answer's own list."""
        await self.connect()
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None
        sent = time.perf_counter()
        writer.write(
            b"POST %s HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            % (path.encode(), len(body))
            + body
        )
        head = await reader.readuntil(b"\r\n\r\n")
        status, headers = _parse_head(head)
        answer = Answer(sent, sent, status, backend=headers.get("x-gateway-backend", ""))
        if into is not None:
            answer.stamps = into
        if headers.get("transfer-encoding") == "chunked":
            await self._read_chunked(reader, marker, answer, stamps)
        else:
            answer.body = await reader.readexactly(int(headers.get("content-length", "0")))
        answer.ended = time.perf_counter()
        if headers.get("connection") == "close":
            self.close()
        return answer

    @staticmethod
    async def _read_chunked(
        reader: asyncio.StreamReader, marker: bytes, answer: Answer, stamps: bool
    ) -> None:
        tail = b""
        keep = max(len(marker), len(_END)) - 1
        while True:
            block = await reader.read(65536)
            if not block:
                raise ConnectionError("the stream ended before its last chunk")
            now = time.perf_counter()
            seen = tail + block
            if answer.first is None and marker in seen:
                answer.first = now
            if stamps:
                answer.stamps.extend([now] * (seen.count(marker) - tail.count(marker)))
            if _END in seen or (not tail and seen.startswith(_END[2:])):
                return
            tail = seen[-keep:]

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return status, headers
