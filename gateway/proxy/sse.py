"""Token timing from an OpenAI/vLLM server-sent-event stream, without decoding every chunk.

The proxy forwards bytes untouched; this only looks at them. An event is `data: {json}\\n\\n`; one
with non-empty text in `choices` is one output token at vLLM's default stream interval, or several
that vLLM merged because its front end fell behind the engine. The usage chunk (`"choices":[]`, sent
with `stream_options.include_usage`) is decoded for exact token counts, and an event carrying an
`error` object marks the stream failed, as vLLM reports errors on a 200 stream.
"""

from __future__ import annotations

import re

import orjson

_TEXT_KEYS = (b'"content":"', b'"content": "', b'"text":"', b'"text": "')
"""A choice's text opening (quotes inside JSON strings are escaped, so these are keys)."""
_EMPTY_TEXTS = tuple(key + b'"' for key in _TEXT_KEYS)
_USAGE_EVENT = re.compile(rb'^data: (\{[^\n]*?"choices": ?\[\][^\n]*)', re.MULTILINE)
_OBJECT_EVENT = re.compile(rb"^data: \{[^\n]*", re.MULTILINE)
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')


class StreamStats:
    __slots__ = ("_tail", "error", "events", "first_at", "last_at", "prompt_tokens", "usage_tokens")

    def __init__(self) -> None:
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.events = 0
        """Events that carried output text."""
        self.usage_tokens: int | None = None
        self.prompt_tokens = 0
        self.error = False
        self._tail = b""

    def feed(self, data: bytes, now: float) -> None:
        """Take the events completed by `data` (a partial one waits for the next read).

        A read holds however many events arrived since the last one, thousands when a backend
        outruns its client, so they are counted by a few substring counts over the whole read
        (text openings less empty texts: one per token event, a choice per event as vLLM streams)
        rather than by a Python step per event; usage and error events, rare, are then looked at
        one by one, only in a read that holds one."""
        buf = self._tail + data if self._tail else data
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._tail = buf
            return
        if end + 2 < len(buf):
            buf, self._tail = buf[: end + 2], buf[end + 2 :]
        else:
            self._tail = b""
        tokens = sum(map(buf.count, _TEXT_KEYS)) - sum(map(buf.count, _EMPTY_TEXTS))
        if tokens:
            self.events += tokens
            if self.first_at is None:
                self.first_at = now
            self.last_at = now
        if b"[]" in buf:
            for usage in _USAGE_EVENT.findall(buf):
                self._usage(usage)
        if b'"error"' in buf:
            for event in _OBJECT_EVENT.findall(buf):
                if b'"error"' in event and b'"choices"' not in event:
                    self.error = True

    def _usage(self, payload: bytes) -> None:
        try:
            usage = orjson.loads(payload).get("usage") or {}
        except orjson.JSONDecodeError:
            return
        if isinstance(usage, dict):
            self.usage_tokens = int(usage.get("completion_tokens") or 0)
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)

    @property
    def tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else self.events

    def tpot(self) -> float | None:
        """Mean gap between output tokens after the first."""
        if self.first_at is None or self.last_at is None or self.tokens < 2:
            return None
        return (self.last_at - self.first_at) / (self.tokens - 1)


def body_usage(body: bytes) -> tuple[int, int]:
    """(prompt_tokens, completion_tokens) from a non-streaming response body; zeros if absent."""
    completion = _COMPLETION_TOKENS.search(body)
    prompt = _PROMPT_TOKENS.search(body)
    return (int(prompt.group(1)) if prompt else 0, int(completion.group(1)) if completion else 0)
