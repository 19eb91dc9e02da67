"""Token accounting without a tokenizer: prompt length, prefix-block hashes, output text, embeddings.

Prompt length: ceil(utf-8 bytes / bytes_per_token), at least 1. A byte-level BPE trained on little
text makes about one token per byte of unseen text (bytes_per_token 1.0, the tiny CPU engine);
production tokenizers make about four bytes per token of English (GPU profiles, 4.0). A chat prompt
is its messages' contents plus `chat_tokens_per_message` per message and `chat_tokens_base` for
the template (role markers, the assistant header), as a chat template adds.

Prefix hashes: token i is taken to cover the bytes of the rendered prompt in proportion
(i * bytes / tokens), and block j's hash chains the digest of every byte up to its end, so equal
prefixes give equal hashes and the engine's prefix cache shares them as vLLM's would.
"""

from __future__ import annotations

import hashlib
import math
import random
import struct
from collections.abc import Sequence

from gateway.sim.profiles import Profile

_WORDS = (
    " the", " model", " serves", " a", " token", " at", " every", " step", " of", " batch",
    " and", " cache", " blocks", " fill", " with", " prompt", " text", " while", " requests",
    " wait", " in", " queue", " for", " their", " turn", ".", ",", " latency", " stays", " low",
)  # fmt: skip


def count_bytes(n_bytes: int, profile: Profile) -> int:
    return max(1, math.ceil(n_bytes / profile.bytes_per_token))


def chat_prompt(messages: Sequence[tuple[str, str]], profile: Profile) -> tuple[int, bytes]:
    """Token count and rendered bytes of a chat prompt given (role, content) pairs."""
    rendered = b"".join(role.encode() + b"\x00" + content.encode() + b"\x01" for role, content in messages)
    content_bytes = sum(len(content.encode()) for _, content in messages)
    tokens = (
        math.ceil(content_bytes / profile.bytes_per_token)
        + profile.chat_tokens_per_message * len(messages)
        + profile.chat_tokens_base
    )
    return max(1, tokens), rendered


def text_prompt(text: str, profile: Profile) -> tuple[int, bytes]:
    data = text.encode()
    return count_bytes(len(data), profile), data


def ids_prompt(ids: Sequence[int]) -> tuple[int, bytes]:
    return max(1, len(ids)), b"".join(struct.pack("<q", i) for i in ids)


def block_hashes(rendered: bytes, num_tokens: int, block_size: int) -> list[int]:
    """Chained prefix hashes of every full block of a prompt of `num_tokens` tokens."""
    full = num_tokens // block_size
    hasher = hashlib.blake2b(digest_size=8)
    out: list[int] = []
    start = 0
    n = len(rendered)
    for j in range(full):
        end = min(n, ((j + 1) * block_size * n + num_tokens - 1) // num_tokens)
        hasher.update(rendered[start:end])
        hasher.update(struct.pack("<q", j))
        out.append(int.from_bytes(hasher.copy().digest(), "little", signed=True))
        start = end
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
