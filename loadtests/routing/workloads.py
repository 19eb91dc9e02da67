"""The routing benchmark's three workloads: what each simulated user sends next.

- `chat`: 16 system prompts of about 2,000 tokens; 200 users each hold a conversation of 5 to 10
  turns, every turn's prompt the whole history (system prompt, then user and assistant messages),
  and start a new one (another system prompt) when it ends. A user message is 100 to 400 tokens.
  At the start each user is at a random turn of a conversation whose earlier turns are already in
  its history (and in no cache), so the mix of turns is the steady one from the first request.
- `docs`: 50 long documents (3,000 to 7,000 tokens), each user asks a question (15 to 75 tokens)
  about a document drawn uniformly, as a completion prompt: the document, then the question.
- `distinct`: prompts of the documents' lengths that share nothing, to show what routing costs.

Users think between an answer and their next request (exponential, mean `think`), each workload's
think time set so that 200 users offer least_loaded a little more than its capacity (a closed loop
near capacity: least_loaded runs full and queues a little; a strategy that needs less prefill serves
more, or the same with less queueing).

Text is drawn from one corpus of random words (4 characters per token, the simulator's rate for
GPU profiles): a document or system prompt is a fixed slice, a message or question a random slice.
The reply a chat user keeps in its history is corpus text of the reply's length: the client does
not decode the stream (to stay cheap), and the simulator's reply text would not be found in its
cache either (it keys generated blocks by sequence).
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field
from typing import Protocol

import orjson

CHARS_PER_TOKEN = 4
SYSTEM_PROMPTS = 16
SYSTEM_TOKENS = 2_000
DOCUMENTS = 50


class Workload(Protocol):
    name: str
    path: str
    marker: bytes
    think: float
    """Mean think time (seconds at full engine speed) that offers least_loaded a little more than its
    capacity on the benchmark's engines (found with the virtual-time replay, loadtests/routing/replay.py,
    where least_loaded's TTFT P90 is then 4-8 s, mostly queueing)."""
    """Bytes that only a chunk carrying output text contains (the first one is the TTFT)."""

    def body(self, user: int) -> bytes:
        """The JSON body of `user`'s next request."""

    def answered(self, user: int) -> None:
        """`user`'s request was answered (the reply joins a conversation's history)."""


def corpus(seed: int, chars: int) -> str:
    rng = random.Random(seed)
    letters = string.ascii_lowercase
    words = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(4096)]
    parts: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(words)
        parts.append(word)
        size += len(word) + 1
    return " ".join(parts)


@dataclass(slots=True)
class Text:
    """Slices of one corpus: fixed ones (documents, system prompts) and random ones (messages)."""

    rng: random.Random
    text: str = field(default="")

    @classmethod
    def make(cls, seed: int, chars: int = 2_000_000) -> Text:
        return cls(random.Random(seed), corpus(seed, chars))

    def fixed(self, index: int, tokens: int) -> str:
        start = (index * 7919 * 97) % (len(self.text) - tokens * CHARS_PER_TOKEN)
        return self.text[start : start + tokens * CHARS_PER_TOKEN]

    def sample(self, low_tokens: int, high_tokens: int) -> str:
        chars = self.rng.randint(low_tokens, high_tokens) * CHARS_PER_TOKEN
        start = self.rng.randrange(len(self.text) - chars)
        return self.text[start : start + chars]


@dataclass(slots=True)
class _Conversation:
    system: int
    turns: int
    messages: list[dict[str, str]]
    asked: str = ""
    """The user message awaiting its answer; it joins the history only once answered."""


class Chat:
    name = "chat"
    path = "/v1/chat/completions"
    marker = b'"delta":{"content"'
    think = 4.0

    def __init__(self, model: str, users: int, max_tokens: int, seed: int) -> None:
        self._model = model
        self._max_tokens = max_tokens
        self._text = Text.make(seed)
        self._systems = [self._text.fixed(1000 + i, SYSTEM_TOKENS) for i in range(SYSTEM_PROMPTS)]
        self._users = [self._start(warm=True) for _ in range(users)]

    def _start(self, *, warm: bool) -> _Conversation:
        rng = self._text.rng
        system = rng.randrange(SYSTEM_PROMPTS)
        turns = rng.randint(5, 10)
        chat = _Conversation(system, turns, [{"role": "system", "content": self._systems[system]}])
        for _ in range(rng.randrange(turns) if warm else 0):
            chat.messages.append({"role": "user", "content": self._text.sample(100, 400)})
            self._reply(chat)
        return chat

    def _reply(self, chat: _Conversation) -> None:
        reply = self._text.sample(self._max_tokens, self._max_tokens)
        chat.messages.append({"role": "assistant", "content": reply})

    def body(self, user: int) -> bytes:
        chat = self._users[user]
        chat.asked = self._text.sample(100, 400)
        messages = [*chat.messages, {"role": "user", "content": chat.asked}]
        return _request(self._model, self._max_tokens, messages=messages)

    def answered(self, user: int) -> None:
        chat = self._users[user]
        chat.messages.append({"role": "user", "content": chat.asked})
        self._reply(chat)
        if len(chat.messages) >= 1 + 2 * chat.turns:
            self._users[user] = self._start(warm=False)


class _OneShot:
    """A workload whose requests stand alone: nothing to remember once answered."""

    def __init__(self, model: str, max_tokens: int, seed: int) -> None:
        self._model = model
        self._max_tokens = max_tokens
        self._text = Text.make(seed)

    def answered(self, user: int) -> None:
        pass


class Documents(_OneShot):
    name = "docs"
    path = "/v1/completions"
    marker = b'"text":'
    think = 10.0

    def __init__(self, model: str, max_tokens: int, seed: int) -> None:
        super().__init__(model, max_tokens, seed)
        rng = random.Random(seed + 1)
        self._docs = [self._text.fixed(5000 + i, rng.randint(3000, 7000)) for i in range(DOCUMENTS)]

    def body(self, user: int) -> bytes:
        doc = self._docs[self._text.rng.randrange(DOCUMENTS)]
        prompt = f"{doc}\n\nQuestion: {self._text.sample(15, 75)}\nAnswer:"
        return _request(self._model, self._max_tokens, prompt=prompt)


class Distinct(_OneShot):
    name = "distinct"
    path = "/v1/chat/completions"
    marker = b'"delta":{"content"'
    think = 14.0

    def body(self, user: int) -> bytes:
        messages = [{"role": "user", "content": self._text.sample(3000, 7000)}]
        return _request(self._model, self._max_tokens, messages=messages)


WORKLOADS = ("chat", "docs", "distinct")


def make(name: str, model: str, users: int, max_tokens: int, seed: int) -> Workload:
    if name == "chat":
        return Chat(model, users, max_tokens, seed)
    if name == "docs":
        return Documents(model, max_tokens, seed)
    if name == "distinct":
        return Distinct(model, max_tokens, seed)
    raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")


def _request(model: str, max_tokens: int, **prompt: object) -> bytes:
    return orjson.dumps(
        {"model": model, **prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    )
