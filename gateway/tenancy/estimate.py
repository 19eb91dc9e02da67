"""A prompt's tokens before the backend counts them: what admission charges until `usage` says.

ceil(characters / 4) over the text a request sends (chat message contents, a completion prompt,
embedding inputs), plus 4 tokens per chat message for the template's role markers: OpenAI's rule of
thumb for English text is about four characters per token; token ids sent as a list count one each
(told apart by the first element, so the estimate costs the same however many ids there are).
A request's most tokens (`max_output_tokens` with the prompt's) bound what the KV cache holds for it
before any answer has said how long answers are (gateway.control.ceiling).
An estimate only has to be of the right size: the fair queue and the token quota are corrected with
the backend's count (`usage.prompt_tokens`) when the answer carries one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

CHARS_PER_TOKEN = 4.0
TOKENS_PER_MESSAGE = 4


def prompt_tokens(payload: Mapping[str, Any]) -> int:
    """Estimated prompt tokens of an OpenAI request body (chat, completions or embeddings)."""
    messages = payload.get("messages")
    if isinstance(messages, list):
        chars = sum(_chars(m.get("content")) for m in messages if isinstance(m, dict))
        return math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * len(messages)
    text = payload.get("prompt", payload.get("input"))
    return _tokens(text)


def max_output_tokens(payload: Mapping[str, Any]) -> int | None:
    """The output tokens a request allows itself (`max_completion_tokens`, else `max_tokens`), if it
    says: with the prompt's, the most KV cache one of its sequences will hold."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = payload.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _tokens(value: object) -> int:
    if isinstance(value, str):
        return math.ceil(len(value) / CHARS_PER_TOKEN)
    if isinstance(value, list):
        if value and isinstance(value[0], int):  # token ids: the API's prompt types never mix ids and text
            return len(value)
        return sum(_tokens(v) for v in value)
    return 0


def _chars(content: object) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return 0
