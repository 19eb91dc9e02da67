"""Multipart uploads streamed to disk (as httpx encodes them for the OpenAI SDK) and streamed back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from gateway.batch.files import receive_upload, send_file
from gateway.proxy.errors import GatewayError
from gateway.types import Message, Receive, Scope


def upload(data: bytes, chunk: int = 1000, **fields: str) -> tuple[Scope, Receive]:
    request = httpx.Request(
        "POST",
        "http://gateway/v1/files",
        files={"file": ("in.jsonl", data)},
        data=fields or {"purpose": "batch"},
    )
    body = request.read()
    headers = [(k.lower().encode(), v.encode()) for k, v in request.headers.items()]
    parts = [body[i : i + chunk] for i in range(0, len(body), chunk)]

    async def receive() -> Message:
        piece = parts.pop(0)
        return {"type": "http.request", "body": piece, "more_body": bool(parts)}

    return {"type": "http", "headers": headers}, receive


def test_the_file_part_is_written_to_disk_and_fields_are_read(tmp_path: Path) -> None:
    data = b"".join(b'{"line": %d}\n' % i for i in range(5000))
    scope, receive = upload(data, purpose="batch", **{"expires_after[anchor]": "created_at"})
    got = asyncio.run(receive_upload(scope, receive, tmp_path / "f", max_bytes=len(data)))
    assert (tmp_path / "f").read_bytes() == data
    assert (got.filename, got.size) == ("in.jsonl", len(data))
    assert got.fields == {"purpose": "batch", "expires_after[anchor]": "created_at"}
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_an_upload_over_the_limit_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    scope, receive = upload(b"x" * 50_000)
    scope["headers"] = [h for h in scope["headers"] if h[0] != b"content-length"]  # found while streaming
    with pytest.raises(GatewayError) as refused:
        asyncio.run(receive_upload(scope, receive, tmp_path / "f", max_bytes=10_000))
    assert refused.value.status == 413
    assert list(tmp_path.iterdir()) == []


async def test_a_declared_length_over_the_limit_is_refused_before_reading(tmp_path: Path) -> None:
    scope, receive = upload(b"x" * 200_000)
    with pytest.raises(GatewayError) as refused:
        await receive_upload(scope, receive, tmp_path / "f", max_bytes=10_000)
    assert refused.value.status == 413


async def test_a_form_without_a_file_or_not_multipart_is_a_400(tmp_path: Path) -> None:
    request = httpx.Request("POST", "http://g/v1/files", files={"purpose": (None, "batch")})
    body = request.read()
    headers = [(k.lower().encode(), v.encode()) for k, v in request.headers.items()]

    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    with pytest.raises(GatewayError) as missing:
        await receive_upload({"headers": headers}, receive, tmp_path / "f", 1000)
    assert (missing.value.status, missing.value.param) == (400, "file")
    json_scope = {"headers": [(b"content-type", b"application/json")]}
    with pytest.raises(GatewayError) as wrong:
        await receive_upload(json_scope, receive, tmp_path / "f", 1000)
    assert wrong.value.status == 400


async def test_a_file_is_streamed_back_whole(tmp_path: Path) -> None:
    data = bytes(range(256)) * 5000
    (tmp_path / "f").write_bytes(data)
    messages: list[Message] = []

    async def send(message: Message) -> None:
        messages.append(message)

    await send_file(send, tmp_path / "f", len(data))
    assert messages[0]["status"] == 200
    assert b"".join(m.get("body", b"") for m in messages[1:]) == data
    assert len(messages) > 3 and messages[-1]["more_body"] is False
