"""What the simulated clients send: the request mix, the prompts, and how a refusal is read.

Kept apart from the locustfile so it can be used and tested without importing Locust (whose import
patches the standard library for gevent).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from loadtests.lengths import Lengths, parse_lengths

KINDS = {
    "chat-stream": ("/v1/chat/completions", True),
    "chat": ("/v1/chat/completions", False),
    "completion-stream": ("/v1/completions", True),
    "completion": ("/v1/completions", False),
}
WORDS = (
    "the quick brown fox jumps over a lazy dog while seven bright stars watch from far above "
    "every river runs to the sea and each small stone holds a story about time light water "
    "green hills quiet roads old maps paper boats warm bread open doors"
)


@dataclass(frozen=True, slots=True)
class Profile:
    model: str
    api_key: str
    kinds: tuple[str, ...]
    weights: tuple[float, ...]
    prompt: Lengths
    output: Lengths
    ignore_eos: bool
    think_time: float
    honor_retry_after: bool
    seed: int


def parse_mix(spec: str) -> tuple[tuple[str, ...], tuple[float, ...]]:
    kinds, weights = [], []
    for item in (p.strip() for p in str(spec).split(",") if p.strip()):
        kind, _, weight = item.partition("=")
        if kind.strip() not in KINDS:
            raise ValueError(f"--mix: unknown kind {kind!r}; use {', '.join(KINDS)}")
        try:
            w = float(weight) if weight else 1.0
        except ValueError:
            raise ValueError(f"--mix: weight of {kind!r} must be a number") from None
        if w < 0:
            raise ValueError(f"--mix: weight of {kind!r} must be >= 0")
        kinds.append(kind.strip())
        weights.append(w)
    if not kinds or sum(weights) <= 0:
        raise ValueError("--mix needs at least one kind with a positive weight")
    return tuple(kinds), tuple(weights)


def read_profile(options: Any) -> Profile:
    kinds, weights = parse_mix(options.mix)
    return Profile(
        model=str(options.model or ""),
        api_key=str(options.api_key or ""),
        kinds=kinds,
        weights=weights,
        prompt=parse_lengths(options.prompt_tokens),
        output=parse_lengths(options.output_tokens),
        ignore_eos=not _flag(options.no_ignore_eos),
        think_time=max(0.0, float(options.think_time or 0)),
        honor_retry_after=not _flag(options.ignore_retry_after),
        seed=int(options.seed or 0),
    )


def _flag(value: Any) -> bool:
    # The web UI hands booleans back as strings.
    return value is True or str(value).lower() in ("true", "1", "yes", "on")


def prompt_text(rng: random.Random, tokens: int) -> str:
    # One common short word is about one token for Llama-style tokenizers; random order keeps the
    # server's prefix cache from sharing prompts between requests.
    words = WORDS.split()
    return " ".join(rng.choice(words) for _ in range(tokens))


def next_request(profile: Profile, model: str, rng: random.Random) -> tuple[str, bool, dict[str, Any]]:
    """Draw the next request: its path, whether it streams, and its JSON body."""
    kind = rng.choices(profile.kinds, profile.weights)[0]
    path, stream = KINDS[kind]
    text = prompt_text(rng, profile.prompt.sample(rng))
    body: dict[str, Any] = {"model": model, "max_tokens": profile.output.sample(rng), "stream": stream}
    if path == "/v1/chat/completions":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    if stream:
        # vLLM then ends the stream with a usage chunk: exact output token counts
        body["stream_options"] = {"include_usage": True}
    if profile.ignore_eos:
        body["ignore_eos"] = True  # vLLM sampling extension: answers are exactly max_tokens long
    return path, stream, body
