"""Request parsing and response bodies in the shapes vLLM's OpenAI-compatible server uses.

Errors follow vLLM's `ErrorResponse`: {"error": {"message", "type", "param", "code"}} with the
integer status as `code`. A prompt of max_model_len tokens or more is refused with vLLM's
message; a `max_tokens` that does not fit after the prompt is cut to fit, as the engine does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.sim import tokens
from gateway.sim.profiles import Profile

ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    429: "RateLimitError",
    503: "Service Unavailable",
}
"""vLLM's error `type` per status (a refusal it means to be retried is typed by its HTTP phrase)."""
ENGINE_BUSY = (
    "The engine is currently busy and cannot accept new requests. "
    "Please try again later or on a different instance."
)
"""vLLM 0.32's answer (503) past `--max-num-queued-reqs` (vllm.exceptions.QueueOverflowError)."""


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> bytes:
        kind = ERROR_TYPES.get(
            self.status, "InternalServerError" if self.status >= 500 else "BadRequestError"
        )
        return orjson.dumps(
            {
                "error": {
                    "message": self.message,
                    "type": kind,
                    "param": self.param,
                    "code": self.status,
                }
            }
        )


@dataclass(frozen=True, slots=True)
class Generate:
    kind: str
    """'chat' or 'completion'."""
    model: str
    prompt_len: int
    hashes: list[int]
    max_tokens: int | None
    ignore_eos: bool
    stream: bool
    include_usage: bool


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"JSON decode error: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


def check_model(body: dict[str, Any], served: str) -> str:
    model = body.get("model")
    if model is None:
        return served
    if model != served:
        raise ApiError(404, f"The model `{model}` does not exist.", "model")
    return served


def _content(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if not isinstance(part, dict):
                raise ApiError(400, "message content parts must be objects", "messages")
            if part.get("type") == "text":
                parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise ApiError(400, "message content must be a string or a list of parts", "messages")


def _opt_int(body: dict[str, Any], key: str, minimum: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{key} must be an integer", key)
    if value < minimum:
        raise ApiError(400, f"{key} must be at least {minimum}, got {value}.", key)
    return value


def _flags(body: dict[str, Any]) -> tuple[bool, bool, bool]:
    stream = body.get("stream", False)
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(stream, bool) or not isinstance(ignore_eos, bool):
        raise ApiError(400, "stream and ignore_eos must be booleans")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise ApiError(400, "stream_options must be an object", "stream_options")
        if not stream:
            raise ApiError(400, "Stream options can only be defined when `stream=True`.")
        include_usage = bool(options.get("include_usage", False))
    return stream, ignore_eos, include_usage


def _check_length(prompt_len: int, profile: Profile) -> None:
    if prompt_len >= profile.max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {profile.max_model_len} tokens. "
            f"However, your request has {prompt_len} input tokens. "
            "Please reduce the length of the input messages.",
        )


def parse_chat(body: dict[str, Any], profile: Profile, served: str) -> Generate:
    model = check_model(body, served)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list", "messages")
    pairs: list[tuple[str, str]] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, "each message needs a string role", "messages")
        pairs.append((message["role"], _content(message.get("content"))))
    prompt_len, rendered = tokens.chat_prompt(pairs, profile)
    max_tokens = _opt_int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _opt_int(body, "max_tokens", 1)
    return _generate("chat", model, prompt_len, rendered, max_tokens, body, profile)


def parse_completion(body: dict[str, Any], profile: Profile, served: str) -> Generate:
    model = check_model(body, served)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        prompt_len, rendered = tokens.text_prompt(prompt, profile)
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        prompt_len, rendered = tokens.ids_prompt(prompt)
    else:
        raise ApiError(400, "prompt must be a string or a list of token ids", "prompt")
    # vLLM's completions default is 16 tokens (OpenAI's documented default).
    max_tokens = _opt_int(body, "max_tokens", 1) if "max_tokens" in body else 16
    return _generate("completion", model, prompt_len, rendered, max_tokens, body, profile)


def _generate(
    kind: str,
    model: str,
    prompt_len: int,
    rendered: tokens.Rendered,
    max_tokens: int | None,
    body: dict[str, Any],
    profile: Profile,
) -> Generate:
    _check_length(prompt_len, profile)
    stream, ignore_eos, include_usage = _flags(body)
    return Generate(
        kind=kind,
        model=model,
        prompt_len=prompt_len,
        hashes=tokens.block_hashes(rendered, prompt_len, profile.block_size),
        max_tokens=max_tokens,
        ignore_eos=ignore_eos,
        stream=stream,
        include_usage=include_usage,
    )


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def full_response(
    req: Generate, rid: str, created: int, text: str, finish_reason: str, completion_tokens: int
) -> bytes:
    if req.kind == "chat":
        choice: dict[str, object] = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }
        obj = "text_completion"
    return orjson.dumps(
        {
            "id": rid,
            "object": obj,
            "created": created,
            "model": req.model,
            "choices": [choice],
            "usage": usage(req.prompt_len, completion_tokens),
        }
    )


class ChunkWriter:
    """Pre-renders the constant parts of a stream's SSE chunks so each token costs one dumps."""

    __slots__ = ("_head", "_open", "_req", "_tail", "_tail_final")

    def __init__(self, req: Generate, rid: str, created: int) -> None:
        self._req = req
        kind = b"chat.completion.chunk" if req.kind == "chat" else b"text_completion"
        self._head = (
            b'data: {"id":"' + rid.encode() + b'","object":"' + kind + b'","created":'
            + str(created).encode() + b',"model":' + orjson.dumps(req.model) + b',"choices":'
        )  # fmt: skip
        if req.kind == "chat":
            self._open = b'[{"index":0,"delta":{"content":'
            self._tail = b'},"logprobs":null,"finish_reason":null}]}\n\n'
            self._tail_final = b'},"logprobs":null,"finish_reason":%s,"stop_reason":null}]}\n\n'
        else:
            self._open = b'[{"index":0,"text":'
            self._tail = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
            self._tail_final = b',"logprobs":null,"finish_reason":%s,"stop_reason":null}]}\n\n'

    def role(self) -> bytes:
        return (
            self._head
            + b'[{"index":0,"delta":{"role":"assistant","content":""},'
            + b'"logprobs":null,"finish_reason":null}]}\n\n'
        )

    def token(self, text: str, finish_reason: str | None = None) -> bytes:
        if finish_reason is None:
            return self._head + self._open + orjson.dumps(text) + self._tail
        tail = self._tail_final % orjson.dumps(finish_reason)
        return self._head + self._open + orjson.dumps(text) + tail

    def usage(self, completion_tokens: int) -> bytes:
        return (
            self._head
            + b'[],"usage":'
            + orjson.dumps(usage(self._req.prompt_len, completion_tokens))
            + b"}\n\n"
        )

    def error(self, message: str, status: int) -> bytes:
        return b"data: " + ApiError(status, message).body() + b"\n\n"

    DONE = b"data: [DONE]\n\n"
