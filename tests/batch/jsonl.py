"""Batch input lines for the tests."""

from __future__ import annotations

from typing import Any

import orjson

CHAT = "/v1/chat/completions"


def chat_line(custom_id: str, model: str = "tiny-llama", url: str = CHAT, **body: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": url,
        "body": {"model": model, "messages": [{"role": "user", "content": f"say {custom_id}"}], **body},
    }


def jsonl(*lines: dict[str, Any] | bytes) -> bytes:
    return b"".join((line if isinstance(line, bytes) else orjson.dumps(line)) + b"\n" for line in lines)
