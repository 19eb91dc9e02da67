"""Incremental reading of an OpenAI/vLLM server-sent-event stream and the per-request timings.

Definitions (the ones vLLM's ``benchmarks/benchmark_serving.py`` reports):

- TTFT  = t(first chunk carrying content) - t(request sent)
- TPOT  = (e2e - TTFT) / (output_tokens - 1), defined when output_tokens >= 2
- tokens/s = output_tokens / e2e, the rate one client actually received

``output_tokens`` is ``usage.completion_tokens`` from the final usage chunk (sent when the request
has ``stream_options.include_usage``); a server that ignores that option is measured by counting the
chunks that carried content, which is exact for vLLM (one token per chunk unless speculative
decoding bundles several). Timestamps are passed in, so the class never reads a clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Timings:
    e2e: float
    ttft: float | None
    tpot: float | None
    output_tokens: int
    prompt_tokens: int | None
    tokens_from_usage: bool

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.e2e if self.e2e > 0 else 0.0


def _content(choice: dict[str, Any]) -> str:
    for key in ("delta", "message"):
        part = choice.get(key)
        if isinstance(part, dict):
            return str(part.get("content") or part.get("reasoning_content") or "")
    return str(choice.get("text") or "")


class StreamReader:
    """Feed it the stream line by line with the time each line arrived."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.content_chunks = 0
        self.usage: dict[str, Any] | None = None
        self.error: str | None = None
        self.done = False

    def feed(self, line: bytes | str, now: float) -> None:
        text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        text = text.strip()
        if not text.startswith("data:"):
            return  # blank separators, comments (": ping") and other SSE fields
        payload = text[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return
        try:
            event = json.loads(payload)
        except ValueError:
            self.error = f"undecodable stream chunk: {payload[:80]!r}"
            return
        if not isinstance(event, dict):
            return
        if "error" in event:
            err = event["error"]
            self.error = str(err.get("message", err) if isinstance(err, dict) else err)
            return
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        choices = event.get("choices") or []
        if any(_content(c) for c in choices if isinstance(c, dict)):
            self.content_chunks += 1
            if self.first_token_at is None:
                self.first_token_at = now
            self.last_token_at = now

    def timings(self, ended: float) -> Timings:
        from_usage = self.usage is not None and isinstance(self.usage.get("completion_tokens"), int)
        tokens = int(self.usage["completion_tokens"]) if from_usage and self.usage else 0
        if not from_usage:
            tokens = self.content_chunks
        prompt = self.usage.get("prompt_tokens") if self.usage else None
        return build_timings(
            self.started,
            ended,
            self.first_token_at,
            tokens,
            prompt if isinstance(prompt, int) else None,
            from_usage,
        )


def build_timings(
    started: float,
    ended: float,
    first_token_at: float | None,
    output_tokens: int,
    prompt_tokens: int | None,
    tokens_from_usage: bool,
) -> Timings:
    e2e = ended - started
    ttft = None if first_token_at is None else first_token_at - started
    tpot = None
    if ttft is not None and output_tokens >= 2:
        tpot = (e2e - ttft) / (output_tokens - 1)
    return Timings(e2e, ttft, tpot, output_tokens, prompt_tokens, tokens_from_usage)


def completion_timings(body: bytes, started: float, ended: float) -> Timings:
    """Timings of a non-streaming answer: no first token is visible, tokens come from ``usage``."""
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError("response body is not a JSON object")
    usage = data.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        prompt = usage.get("prompt_tokens")
        return build_timings(
            started,
            ended,
            None,
            usage["completion_tokens"],
            prompt if isinstance(prompt, int) else None,
            True,
        )
    text = " ".join(_content(c) for c in data.get("choices") or [] if isinstance(c, dict))
    # No usage: whitespace-separated words are the closest count available without the tokenizer.
    return build_timings(started, ended, None, len(text.split()), None, False)
