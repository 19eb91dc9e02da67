"""File bytes on disk: a multipart upload streamed straight to its file, and a file streamed back.

Upload: `multipart/form-data` as the OpenAI SDK sends `files.create` (a `file` part, a `purpose`
field, optionally `expires_after[anchor]` and `expires_after[seconds]`), parsed chunk by chunk as
it arrives with python-multipart's callback parser. Why that dependency: it is the parser
Starlette's own `request.form()` runs on, but `form()` spools each file to a temporary file of its
own (to be copied again to its place) and has no limit on a file part's size; the callbacks let the
file part be written once, straight to `<path>.part`, and counted as it goes, so memory stays at
one chunk whatever the size, and once the size passes `max_bytes` the upload is refused at once
with 413 (reading no further) and the partial file removed. A body the parser cannot read (a part
header over its bound, no boundary where one is due) is refused with 400 `invalid_multipart`, and
one that ends before its closing boundary with 400 `upload_incomplete`: only a form that ended as
multipart says it ends is stored. A complete upload is flushed to disk
(fsync) and renamed to `path` before its record is committed; a file on disk with no record (a
crash in between) is removed at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from gateway.proxy.errors import GatewayError, excerpt
from gateway.proxy.request import content_length
from gateway.types import Receive, Scope, Send

FIELD_LIMIT = 1024
"""Longest value of a plain form field (purpose, expires_after); the parser itself bounds the
parts' headers (8 of at most 4,224 bytes each)."""
CHUNK = 256 * 1024


@dataclass(slots=True)
class Upload:
    filename: str = ""
    size: int = 0
    fields: dict[str, str] = field(default_factory=dict)


class _Form:
    """python-multipart callbacks: headers of each part, a field's value, the file's bytes."""

    def __init__(self, part_path: Path, max_bytes: int) -> None:
        self.upload = Upload()
        self._part_path = part_path
        self._max_bytes = max_bytes
        self._headers: dict[bytes, bytes] = {}
        self._header = b""
        self._value = b""
        self._name = ""
        self._file: BinaryIO | None = None
        self._field = b""
        self.has_file = False
        self.ended = False
        """The closing boundary was read."""

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": self._header_field,
            "on_header_value": self._header_value,
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
            "on_end": self._end,
        }

    def _end(self) -> None:
        self.ended = True

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header += data[start:end]  # the parser bounds a header's size and count

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _part_begin(self) -> None:
        self._headers, self._field, self._name = {}, b"", ""

    def _header_end(self) -> None:
        self._headers[self._header.lower()] = self._value
        self._header = self._value = b""

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        self._name = options.get(b"name", b"").decode("utf-8", "replace")
        if b"filename" not in options:
            return
        if self._name != "file" or self.has_file:
            raise GatewayError(400, "send exactly one file, in the form field 'file'", "invalid_multipart")
        self.has_file = True
        self.upload.filename = options[b"filename"].decode("utf-8", "replace")
        self._file = self._part_path.open("wb")

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._file is None:
            self._field = _bounded(self._field + data[start:end], f"form field {excerpt(self._name)}")
            return
        self.upload.size += end - start
        if self.upload.size > self._max_bytes:
            raise GatewayError(
                413, f"the file is over the limit of {self._max_bytes} bytes", "file_too_large", param="file"
            )
        self._file.write(data[start:end])

    def _part_end(self) -> None:
        if self._file is None:
            self.upload.fields[self._name] = self._field.decode("utf-8", "replace")

    def close_file(self) -> BinaryIO | None:
        f, self._file = self._file, None
        return f


async def receive_upload(scope: Scope, receive: Receive, path: Path, max_bytes: int) -> Upload:
    """Stream a multipart upload's file part to `path`; the other fields come back in `fields`."""
    boundary = _boundary(scope)
    length = max(0, next((content_length(v) for k, v in scope["headers"] if k == b"content-length"), 0))
    if length > max_bytes + 64 * 1024:  # the form's own bytes are small beside the limit
        raise GatewayError(413, f"the upload is over the limit of {max_bytes} bytes", "file_too_large")
    part = path.with_name(path.name + ".part")
    form = _Form(part, max_bytes)
    parser = MultipartParser(boundary, form.callbacks())  # type: ignore[arg-type]
    try:
        await _parse(parser, receive)
        if not form.ended:
            raise GatewayError(
                400, "the upload ends before its closing multipart boundary", "upload_incomplete"
            )
        f = form.close_file()
        if f is None:
            raise GatewayError(400, "Missing required parameter: 'file'.", "missing_file", param="file")
        await asyncio.to_thread(_persist, f, part, path)
    except BaseException:
        f = form.close_file()
        if f is not None:
            f.close()
        with contextlib.suppress(FileNotFoundError):
            part.unlink()
        raise
    return form.upload


async def _parse(parser: MultipartParser, receive: Receive) -> None:
    """Feed the request body to `parser` as it arrives; what it cannot parse is a 400."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise GatewayError(400, "the client went away during the upload", "upload_incomplete")
        try:
            parser.write(message.get("body", b""))
        except MultipartParseError as exc:
            raise GatewayError(
                400, f"the upload is not valid multipart: {exc}", "invalid_multipart"
            ) from None
        if not message.get("more_body"):
            parser.finalize()
            return


def _bounded(value: bytes, what: str) -> bytes:
    if len(value) > FIELD_LIMIT:
        raise GatewayError(400, f"{what} is longer than {FIELD_LIMIT} bytes", "invalid_multipart")
    return value


def _persist(f: BinaryIO, part: Path, path: Path) -> None:
    with f:
        f.flush()
        os.fsync(f.fileno())
    part.rename(path)


def _boundary(scope: Scope) -> bytes:
    header = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
    kind, options = parse_options_header(header)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise GatewayError(
            400,
            "upload a file as multipart/form-data (as the OpenAI SDK's files.create does)",
            "invalid_upload",
        )
    return boundary


async def send_file(send: Send, path: Path, size: int) -> None:
    """Stream a file's bytes as the response body, reading in a worker thread."""
    headers = [(b"content-type", b"application/octet-stream"), (b"content-length", str(size).encode())]
    with path.open("rb") as f:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        while chunk := await asyncio.to_thread(f.read, CHUNK):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
