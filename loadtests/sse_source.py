"""A static OpenAI-shaped backend for proxy benchmarks: paced completion streams at little CPU cost.

A proxy that relays tens of thousands of token events a second must be fed by something that costs
less than the proxy per event, or the benchmark measures the feeder. This server does no model work
and no JSON: every answer is a constant. A streamed answer (a body with `"stream":true`) is
`--tokens` completion events, `data: {...,"text":"tok",...}`, then `data: [DONE]`, in HTTP/1.1
chunked encoding. The events of all open streams are written by one timer, one event per stream per
tick of `--interval` seconds (a decode step of a GPU serving a batch), so the per-event cost is one
`transport.write`. Any other POST gets a fixed chat completion; GET /health answers 200 with the number of
streams open (`{"streams": N}`) and
GET /v1/models lists the one model, `instant`.

    python -m loadtests.sse_source PORT [--interval 0.02] [--tokens 50]
"""

from __future__ import annotations

import argparse
import asyncio

EVENT = (
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"instant",'
    b'"choices":[{"index":0,"text":"tok","logprobs":null,"finish_reason":null}]}\n\n'
)
_CHUNK = b"%x\r\n%s\r\n" % (len(EVENT), EVENT)
_DONE = b"data: [DONE]\n\n"
_END = b"%x\r\n%s\r\n0\r\n\r\n" % (len(_DONE), _DONE)
_STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
_COMPLETION = (
    b'{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"instant","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],'
    b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
)
_MODELS = b'{"object":"list","data":[{"id":"instant","object":"model","owned_by":"bench"}]}'


def _fixed(status: bytes, body: bytes) -> bytes:
    return b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        status,
        len(body),
        body,
    )


_ANSWERS = {b"/v1/models": _fixed(b"200 OK", _MODELS)}
_NOT_FOUND = _fixed(b"404 Not Found", b'{"error":{"message":"not found"}}')


class _Ticker:
    """Writes one event to every open stream per tick; a stream past its last token is ended."""

    def __init__(self, interval: float, tokens: int) -> None:
        self.interval = interval
        self.tokens = tokens
        self.streams: dict[_Client, int] = {}
        self._loop = asyncio.get_running_loop()
        self._loop.call_later(interval, self._tick)

    def _tick(self) -> None:
        ended = []
        for client, left in self.streams.items():
            if client.transport.is_closing():
                ended.append(client)
            elif left > 1:
                client.transport.write(_CHUNK)
                self.streams[client] = left - 1
            else:
                client.transport.write(_CHUNK + _END)
                ended.append(client)
        for client in ended:
            del self.streams[client]
            client.streaming = False
            client.parse()
        self._loop.call_later(self.interval, self._tick)


class _Client(asyncio.Protocol):
    def __init__(self, ticker: _Ticker) -> None:
        self.ticker = ticker
        self.buffer = b""
        self.streaming = False
        self.transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.streaming:
            self.parse()

    def connection_lost(self, exc: Exception | None) -> None:
        self.ticker.streams.pop(self, None)

    def parse(self) -> None:
        """Answer every complete request in the buffer (one stream at a time per connection)."""
        while not self.streaming:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].lower()
            length = 0
            at = head.find(b"content-length:")
            if at >= 0:
                length = int(head[at + 15 :].split(b"\r\n", 1)[0])
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            method, path = head.split(b" ", 2)[:2]
            if method == b"post" and b'"stream":true' in body.replace(b" ", b""):
                self.transport.write(_STREAM_HEAD)
                self.streaming = True
                self.ticker.streams[self] = self.ticker.tokens
            elif method == b"post":
                self.transport.write(_fixed(b"200 OK", _COMPLETION))
            elif path == b"/health":  # the streams open now: a benchmark waits for stale ones to end
                self.transport.write(_fixed(b"200 OK", b'{"streams":%d}' % len(self.ticker.streams)))
            else:
                self.transport.write(_ANSWERS.get(path, _NOT_FOUND))


async def serve(port: int, interval: float, tokens: int) -> None:
    ticker = _Ticker(interval, tokens)
    server = await asyncio.get_running_loop().create_server(
        lambda: _Client(ticker), "127.0.0.1", port, backlog=8192
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between a stream's events")
    parser.add_argument("--tokens", type=int, default=50, help="events per stream")
    args = parser.parse_args()
    import uvloop

    uvloop.run(serve(args.port, args.interval, args.tokens))


if __name__ == "__main__":
    main()
