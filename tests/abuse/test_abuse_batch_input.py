"""Odd input to the Files and Batches API gets a clear 4xx in OpenAI's shape, never a 500 or a
traceback: durations, limits and multipart are parsed strictly, and an error quotes at most an
excerpt of what it rejects, so a batch's stored errors stay small whatever its lines hold."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from abuse_helpers import connect, read_to_end

from tests.batch.jsonl import CHAT, chat_line, jsonl
from tests.procs import Proc, spawn_gateway, spawn_sim

BOUNDARY = "b0undary"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    with spawn_sim("--profile", "tiny-cpu") as sim:
        config = {"backends": [sim.url], "batch": {"data_dir": str(tmp_path_factory.mktemp("batch"))}}
        with spawn_gateway(config) as proc:
            yield proc
            assert "Traceback" not in proc.stderr()


def code_of(answer: httpx.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]["code"]


def upload(gw: Proc, data: bytes) -> str:
    answer = httpx.post(
        f"{gw.url}/v1/files", files={"file": ("in.jsonl", data)}, data={"purpose": "batch"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["id"])


def multipart(gw: Proc, body: bytes, length: bytes | None = None) -> bytes:
    """POST /v1/files with `body` as it is, over a raw socket; the whole answer."""
    head = (
        b"POST /v1/files HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Type: multipart/form-data; boundary=%s\r\nContent-Length: %s\r\n\r\n"
        % (BOUNDARY.encode(), length if length is not None else str(len(body)).encode())
    )
    sock = connect(int(gw.url.rsplit(":", 1)[1]), timeout=30)
    sock.sendall(head + body)
    return read_to_end(sock)


def form(content: bytes, *, part_headers: bytes = b"", close: bool = True) -> bytes:
    b = BOUNDARY.encode()
    return (
        b'--%s\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n' % b
        + b'--%s\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n' % b
        + part_headers
        + b"Content-Type: application/octet-stream\r\n\r\n"
        + content
        + (b"\r\n--%s--\r\n" % b if close else b"")
    )


@pytest.mark.parametrize(
    "window", ["9" * 30 + "h", "²h", "\u0661h", "999999999999s", "0h", "h", "24", "24 h"]
)
def test_a_completion_window_that_is_not_plain_digits_and_a_unit_within_30_days_is_refused(
    gw: Proc, window: str
) -> None:
    file_id = upload(gw, jsonl(chat_line("a")))
    body = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": window}
    assert code_of(httpx.post(f"{gw.url}/v1/batches", json=body)) == (400, "invalid_window")


@pytest.mark.parametrize("query", ["limit=²", "limit=%FF", "limit=0", "limit=" + "1" * 5000, "limit=-1"])
def test_a_list_limit_that_is_not_a_plain_number_in_range_is_refused(gw: Proc, query: str) -> None:
    for path in ("/v1/files", "/v1/batches"):
        assert code_of(httpx.get(f"{gw.url}{path}?{query}")) == (400, "invalid_limit")
    assert code_of(httpx.get(f"{gw.url}/v1/batches?limit=101")) == (400, "invalid_limit")


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (form(b"{}\n", part_headers=b"X-Long: " + b"a" * 5000 + b"\r\n"), "invalid_multipart"),
        (b"\x00garbage\xff" * 1000, "invalid_multipart"),
        (form(b"{}\n", close=False), "upload_incomplete"),
    ],
    ids=["long-part-header", "garbage", "no-closing-boundary"],
)
def test_a_multipart_body_that_is_not_a_whole_form_is_refused_and_not_stored(
    gw: Proc, body: bytes, code: str
) -> None:
    before = httpx.get(f"{gw.url}/v1/files").json()["data"]
    answer = multipart(gw, body)
    assert answer.startswith(b"HTTP/1.1 400") and code.encode() in answer
    assert httpx.get(f"{gw.url}/v1/files").json()["data"] == before


def test_a_content_length_with_thousands_of_leading_zeros_is_read_as_its_number(gw: Proc) -> None:
    body = form(jsonl(chat_line("a")))
    answer = multipart(gw, body, b"0" * 5000 + str(len(body)).encode())
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]


def test_errors_quote_an_excerpt_of_what_they_reject(gw: Proc) -> None:
    lines = [chat_line(f"r{i}", url="/v1/" + "u" * 300_000) for i in range(20)]
    file_id = upload(gw, jsonl(*lines))
    body = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}
    batch_id = httpx.post(f"{gw.url}/v1/batches", json=body).json()["id"]
    for _ in range(600):  # validation runs in the background: poll for its verdict
        batch = httpx.get(f"{gw.url}/v1/batches/{batch_id}").json()
        if batch["status"] == "failed":
            break
    errors = batch["errors"]["data"]
    assert len(errors) == 20 and {e["code"] for e in errors} == {"invalid_url"}
    assert max(len(e["message"]) for e in errors) < 300
    listed = httpx.get(f"{gw.url}/v1/batches?limit=100")
    assert len(listed.content) < 100_000


def test_a_batch_line_with_too_many_values_is_refused_before_it_is_parsed(gw: Proc) -> None:
    line = chat_line("a")
    line["body"]["messages"][0]["content"] = [[0]] * 100_000
    file_id = upload(gw, jsonl(line))
    body = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}
    batch_id = httpx.post(f"{gw.url}/v1/batches", json=body).json()["id"]
    for _ in range(600):
        batch = httpx.get(f"{gw.url}/v1/batches/{batch_id}").json()
        if batch["status"] == "failed":
            break
    assert [e["code"] for e in batch["errors"]["data"]] == ["json_too_complex"]


def test_a_request_body_with_too_many_values_is_refused_before_it_is_parsed(gw: Proc) -> None:
    body = b'{"model": "tiny-llama", "prompt": [' + b"1," * 200_000 + b"1]}"
    answer = httpx.post(f"{gw.url}/v1/completions", content=body, timeout=30)
    assert code_of(answer) == (400, "json_too_complex")
