"""Token accounting without a tokenizer: prompt length, prefix-block hashes, output text, embeddings.

Prompt length: ceil(utf-8 bytes / bytes_per_token), at least 1. A byte-level BPE trained on little
text makes about one token per byte of unseen text (bytes_per_token 1.0, the tiny CPU engine);
production tokenizers make about four bytes per token of English (GPU profiles, 4.0). A chat prompt
is its messages' contents plus `chat_tokens_per_message` per message and `chat_tokens_base` for
the template (role markers, the assistant header), as a chat template adds.

Prefix hashes: a prompt is rendered as pieces of bytes, each making a known number of tokens (a chat
message's role marker, its content, the template's closing marker), and token k of a piece is taken to
cover the piece's bytes up to k * bytes_per_token (its last token: to the piece's end). So where a
token ends depends only on what comes before it, never on the prompt's total length, and two
prompts with the same leading bytes (a conversation's next turn, one document with another
question) give the same tokens for it. Block j's hash chains the digest of every byte up to its
end, as vLLM chains token ids, so equal prefixes give equal hashes and the engine's prefix cache
shares them as vLLM's would.
"""

from __future__ import annotations

import hashlib
import math
import random
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.sim.profiles import Profile

_WORDS = (
    " the", " model", " serves", " a", " token", " at", " every", " step", " of", " batch",
    " and", " cache", " blocks", " fill", " with", " prompt", " text", " while", " requests",
    " wait", " in", " queue", " for", " their", " turn", ".", ",", " latency", " stays", " low",
)  # fmt: skip


def count_bytes(n_bytes: int, profile: Profile) -> int:
    return max(1, math.ceil(n_bytes / profile.bytes_per_token))


@dataclass(frozen=True, slots=True)
class Rendered:
    """A prompt as (bytes, tokens they make) pieces, in order, and the bytes per token inside a piece."""

    pieces: tuple[tuple[bytes, int], ...]
    bytes_per_token: float


def chat_prompt(messages: Sequence[tuple[str, str]], profile: Profile) -> tuple[int, Rendered]:
    """Token count and rendering of a chat prompt given (role, content) pairs.

    Content tokens are counted over the concatenated contents (ceil(bytes / bytes_per_token)); a
    message gets the ones its content completes, so the count of a message depends only on the
    messages before it.
    """
    bpt = profile.bytes_per_token
    pieces: list[tuple[bytes, int]] = []
    content_bytes = 0
    content_tokens = 0
    for role, content in messages:
        data = content.encode()
        content_bytes += len(data)
        upto = math.ceil(content_bytes / bpt)
        pieces.append((role.encode() + b"\x00", profile.chat_tokens_per_message))
        pieces.append((data + b"\x01", upto - content_tokens))
        content_tokens = upto
    pieces.append((b"\x02", profile.chat_tokens_base))
    tokens = content_tokens + profile.chat_tokens_per_message * len(messages) + profile.chat_tokens_base
    return max(1, tokens), Rendered(tuple(pieces), bpt)


def text_prompt(text: str, profile: Profile) -> tuple[int, Rendered]:
    data = text.encode()
    n = count_bytes(len(data), profile)
    return n, Rendered(((data, n),), profile.bytes_per_token)


def ids_prompt(ids: Sequence[int]) -> tuple[int, Rendered]:
    data = b"".join(struct.pack("<q", i) for i in ids)
    return max(1, len(ids)), Rendered(((data, len(ids)),), 8.0)


def block_hashes(rendered: Rendered, num_tokens: int, block_size: int) -> list[int]:
    """Chained prefix hashes of every full block of a prompt of `num_tokens` tokens."""
    full = num_tokens // block_size
    hasher = hashlib.blake2b(digest_size=8)
    out: list[int] = []
    rate = rendered.bytes_per_token
    done = 0  # tokens of the pieces before the current one
    for data, count in rendered.pieces:
        start = 0
        while len(out) < full and (len(out) + 1) * block_size <= done + count:
            k = (len(out) + 1) * block_size - done  # tokens of this piece up to the block's end
            end = len(data) if k == count else min(len(data), int(k * rate))
            hasher.update(data[start:end])
            hasher.update(struct.pack("<q", len(out)))
            out.append(int.from_bytes(hasher.copy().digest(), "little", signed=True))
            start = end
        if len(out) == full:
            return out
        hasher.update(data[start:])
        done += count
    return out


def token_text(uid: int, index: int) -> str:
    """The text of output token `index` of sequence `uid`: words, deterministic."""
    return _WORDS[(uid * 7 + index) % len(_WORDS)]


def output_text(uid: int, start: int, count: int) -> str:
    return "".join(_WORDS[(uid * 7 + i) % len(_WORDS)] for i in range(start, start + count))


def embedding(text: str, dim: int, seed: int) -> list[float]:
    """A unit vector that depends only on the text, the dimension and the seed."""
    digest = hashlib.blake2b(text.encode(), digest_size=16, key=str(seed).encode()).digest()
    rng = random.Random(digest)
    values = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]
