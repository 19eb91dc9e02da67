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

_EMPTY_TEXT = (b'"content":""', b'"text":""', b'"content": ""', b'"text": ""')
_TEXT = (b'"content":"', b'"text":"', b'"content": "', b'"text": "')
_NO_CHOICES = (b'"choices":[]', b'"choices": []')
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
        buf = self._tail + data if self._tail else data
        start = 0
        while (end := buf.find(b"\n\n", start)) >= 0:
            event = buf[start:end]
            start = end + 2
            if not event.startswith(b"data: {"):
                continue
            if any(marker in event for marker in _NO_CHOICES):
                self._usage(event[6:])
            elif b'"choices"' not in event and b'"error"' in event:
                self.error = True
            elif any(m in event for m in _TEXT) and not any(m in event for m in _EMPTY_TEXT):
                self.events += 1
                if self.first_at is None:
                    self.first_at = now
                self.last_at = now
        self._tail = buf[start:] if start < len(buf) else b""

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
