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

_EMPTY_TEXT = re.compile(rb'"(?:content|text)": ?""')
_TEXT = re.compile(rb'"(?:content|text)": ?"')
_NO_CHOICES = re.compile(rb'"choices": ?\[\]')
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
        if not self._tail and data.find(b"\n\n") == len(data) - 2:
            self._event(data, now)  # one whole event, as a backend sends them: nothing to split
            return
        buf = self._tail + data if self._tail else data
        start = 0
        while (end := buf.find(b"\n\n", start)) >= 0:
            self._event(buf[start:end], now)
            start = end + 2
        self._tail = buf[start:] if start < len(buf) else b""

    def _event(self, event: bytes, now: float) -> None:
        """Classify one event (its trailing blank line may be included). The cheap substring tests
        come first: a token event, nearly every one, passes four tests and one pattern."""
        if not event.startswith(b"data: {"):
            return
        if b"[]" in event and _NO_CHOICES.search(event):
            self._usage(event[6:].rstrip(b"\n"))
        elif b'"error"' in event and b'"choices"' not in event:
            self.error = True
        elif _TEXT.search(event) and not (b'""' in event and _EMPTY_TEXT.search(event)):
            self.events += 1
            if self.first_at is None:
                self.first_at = now
            self.last_at = now

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
