"""What a request is routed by: the chained hashes of its prompt's leading chunks, and its session.

Rendering. Chat messages are rendered in order, each as role + "\\x00" + content + "\\x01" (the text
parts of a content list joined, any other part by its JSON), a completion prompt as its text (token
ids as decimal text). The rendering only has to be the same for the same leading messages; it need
not match the model's chat template, which the gateway does not know.

Chunks. The rendering is cut into chunks of CHUNK_CHARS = 256 characters; only whole chunks count,
as vLLM's prefix cache shares only whole blocks. vLLM's block is 16 tokens on a GPU, about 64
characters of English at 4 characters per token; a chunk of 256 characters (about 64 tokens, 4
blocks) hashes and indexes a quarter as many entries per request (a 9,000-character prompt: 13 us
instead of 45 us to hash), while the match lost at the ragged end of a shared prefix is at most one
chunk, small next to the prefixes worth routing for (system prompts, documents, conversation
history: thousands of tokens). A prompt shorter than one chunk has no chunks and is routed by load.
At most MAX_CHUNKS (256 chunks, 64K characters, about 16K tokens) are hashed: a longer match would
rarely change the choice, and this bounds the work per request.

Chain. h_0 = H(0, c_0), h_j = H(h_{j-1}, c_j), as vLLM chains its block hashes, so h_j names the
whole prefix up to the end of chunk j and two prompts share h_j exactly when they share that prefix.
H is Python's hash of an (int, str) pair: SipHash over the characters, 64 bits, salted per process.
The index lives in one process's memory, and a collision costs only one poorly placed request.

Laziness. A `RouteKey` holds references into the already parsed body and hashes on first use, so a
strategy that does not route by prefix, or a request with no choice of backend, costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

CHUNK_CHARS = 256
MAX_CHUNKS = 256


def render_chat(messages: list[Any]) -> str:
    """The messages as one text: role, NUL, content, SOH, for each message in order."""
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        parts.append(str(message.get("role", "")))
        parts.append("\x00")
        parts.append(_content_text(message.get("content")))
        parts.append("\x01")
    return "".join(parts)


def render_prompt(prompt: object) -> str:
    """A completion prompt as text: a string, the first of a list of strings, or token ids."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return ",".join(str(token) for token in prompt)
    return ""


def chunk_hashes(text: str, chunk: int = CHUNK_CHARS, limit: int = MAX_CHUNKS) -> tuple[int, ...]:
    """The chained hashes of the whole chunks of `text`, at most `limit` of them."""
    count = min(len(text) // chunk, limit)
    out: list[int] = []
    h = 0
    for start in range(0, count * chunk, chunk):
        h = hash((h, text[start : start + chunk]))
        out.append(h)
    return tuple(out)


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            if isinstance(part, dict) and part.get("type") == "text"
            else orjson.dumps(part).decode()
            for part in content
        )
    return "" if content is None else orjson.dumps(content).decode()


class RouteKey:
    """One request's routing key: its prompt (hashed on first use) and its session, if any."""

    __slots__ = ("_chunks", "_messages", "_prompt", "session")

    def __init__(
        self, *, messages: list[Any] | None = None, prompt: object = None, session: str | None = None
    ):
        self._messages = messages
        self._prompt = prompt
        self._chunks: tuple[int, ...] | None = None
        self.session = session
        """The client's conversation id (`x-session-id` header, or the body's `user`)."""

    @classmethod
    def from_body(cls, payload: Mapping[str, Any], session_header: str | None = None) -> RouteKey:
        messages = payload.get("messages")
        user = payload.get("user")
        session = session_header or (user if isinstance(user, str) and user else None)
        return cls(
            messages=messages if isinstance(messages, list) else None,
            prompt=payload.get("prompt"),
            session=session,
        )

    @property
    def chunks(self) -> tuple[int, ...]:
        """Chained hashes of the prompt's leading whole chunks (computed once)."""
        if self._chunks is None:
            messages = self._messages
            text = render_chat(messages) if messages is not None else render_prompt(self._prompt)
            self._chunks = chunk_hashes(text)
            self._messages = self._prompt = None
        return self._chunks
