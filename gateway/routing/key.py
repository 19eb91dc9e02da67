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

Reading. The rendering stops once it has the MAX_CHUNKS chunks it may hash: a prompt of millions of
token ids, messages or content parts costs the hash no more than 64K characters do.

Chain. h_0 = H(s, c_0), h_j = H(h_{j-1}, c_j), as vLLM chains its block hashes, so h_j names the
whole prefix up to the end of chunk j and two prompts share h_j exactly when they share that prefix.

Partition. The seed s is the hash of the request's tenant and its `cache_salt`: vLLM puts the salt
into the hash of a prompt's first block, so requests with different salts never share cached blocks,
and the gateway keeps tenants apart as well, so that where one tenant's request is routed never
depends on what another tenant sent (which would tell it whether the other sent a given prefix).
The session id is hashed with the same seed into one integer: a session map keyed by it holds a
fixed number of bytes per entry whatever the client sends, and one tenant's session id never
steers another's.
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
READ_CHARS = CHUNK_CHARS * MAX_CHUNKS
"""Characters of a rendering that may be hashed: rendering stops once it has these."""


def render_chat(messages: list[Any], limit: int = READ_CHARS) -> str:
    """The messages as one text: role, NUL, content, SOH, for each message in order (the first
    `limit` characters or a little more)."""
    parts: list[str] = []
    size = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role", "")
        content = _content_text(message.get("content"), limit - size)
        parts += (role if isinstance(role, str) else "", "\x00", content, "\x01")
        size += len(parts[-4]) + len(content) + 2
        if size >= limit:
            break
    return "".join(parts)


def render_prompt(prompt: object, limit: int = READ_CHARS) -> str:
    """A completion prompt as text: a string, the first of a list of strings, or token ids (the
    first `limit` characters or a little more)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        # Each id takes at least two characters with its comma: no more than limit / 2 can be read,
        # and orjson renders them in one call rather than a Python step per id.
        return _json_text(prompt[: limit // 2 + 1])[1:-1][:limit]
    return ""


def chunk_hashes(
    text: str, chunk: int = CHUNK_CHARS, limit: int = MAX_CHUNKS, seed: int = 0
) -> tuple[int, ...]:
    """The chained hashes of the whole chunks of `text`, at most `limit` of them, from `seed`."""
    count = min(len(text) // chunk, limit)
    out: list[int] = []
    h = seed
    for start in range(0, count * chunk, chunk):
        h = hash((h, text[start : start + chunk]))
        out.append(h)
    return tuple(out)


def _content_text(content: object, limit: int) -> str:
    """A message's content as text: a string, its text parts joined (any other part as JSON),
    stopping once `limit` characters are there."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        size = 0
        for part in content:
            text = part.get("text") if isinstance(part, dict) and part.get("type") == "text" else None
            texts.append(text if isinstance(text, str) else _json_text(part))
            size += len(texts[-1])
            if size >= limit:
                break
        return "".join(texts)
    return "" if content is None else _json_text(content)


def _json_text(value: object) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # nested deeper than orjson writes: no text to share
        return ""


MAX_SEQUENCES = 1024
"""The most sequences one request is counted as (the limit in force caps it lower)."""


def sequences(payload: Mapping[str, Any]) -> int:
    """Sequences the engine runs for a request: `n` (or `best_of`, if larger) for each prompt of a
    completion's list of prompts, one per input of an embeddings list; at most MAX_SEQUENCES."""
    n = 1
    for key in ("n", "best_of"):
        value = payload.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > n:
            n = value
    prompt = payload.get("prompt", payload.get("input"))
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        n *= len(prompt)
    return min(n, MAX_SEQUENCES)


class RouteKey:
    """One request's routing key: its prompt (hashed on first use) and its session, if any."""

    __slots__ = ("_chunks", "_messages", "_prompt", "seed", "sequences", "session")

    def __init__(
        self,
        *,
        messages: list[Any] | None = None,
        prompt: object = None,
        session: str | None = None,
        partition: tuple[str, str | None] = ("", None),
        sequences: int = 1,
    ):
        self._messages = messages
        self._prompt = prompt
        self._chunks: tuple[int, ...] | None = None
        self.sequences = sequences
        """Sequences the engine runs for the request: it counts that many in flight."""
        self.seed = hash(partition)
        """The hash chain's seed: the (tenant, cache_salt) partition the request belongs to."""
        self.session = None if session is None else hash((self.seed, session))
        """The client's conversation id (`x-session-id` header, or the body's `user`), hashed
        with the partition."""

    @classmethod
    def from_body(
        cls, payload: Mapping[str, Any], session_header: str | None = None, tenant: str = ""
    ) -> RouteKey:
        messages = payload.get("messages")
        user = payload.get("user")
        session = session_header or (user if isinstance(user, str) and user else None)
        salt = payload.get("cache_salt")
        return cls(
            messages=messages if isinstance(messages, list) else None,
            prompt=payload.get("prompt"),
            session=session,
            partition=(tenant, salt if isinstance(salt, str) else None),
            sequences=sequences(payload),
        )

    @property
    def chunks(self) -> tuple[int, ...]:
        """Chained hashes of the prompt's leading whole chunks (computed once)."""
        if self._chunks is None:
            messages = self._messages
            text = render_chat(messages) if messages is not None else render_prompt(self._prompt)
            self._chunks = chunk_hashes(text, seed=self.seed)
            self._messages = self._prompt = None
        return self._chunks
