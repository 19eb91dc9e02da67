"""The Files and Batches API end to end: the real `openai` SDK -> gateway -> simulated vLLM, over loopback."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import orjson
import pytest
from openai.types import Batch

from gateway.app import create_app
from gateway.config import parse_config
from tests.batch.jsonl import CHAT, chat_line, jsonl
from tests.procs import Proc, spawn_gateway, spawn_sim

MODEL = "tiny-llama"
MAX_FILE = 256 * 1024


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    with spawn_sim("--profile", "tiny-cpu", "--seed", "3") as s:
        yield s


@pytest.fixture(scope="module")
def gateway(sim: Proc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    config = {
        "backends": [{"url": sim.url, "name": "sim-0"}],
        "tenants": [{"name": "alpha", "api_keys": ["key-a"]}, {"name": "beta", "api_keys": ["key-b"]}],
        "batch": {"data_dir": str(tmp_path_factory.mktemp("batch")), "max_file_bytes": MAX_FILE},
    }
    with spawn_gateway(config) as gw:
        yield gw


def client(gateway: Proc, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)


def upload(c: openai.OpenAI, data: bytes, name: str = "in.jsonl") -> str:
    return c.files.create(file=(name, data), purpose="batch").id


def finished(c: openai.OpenAI, batch_id: str, timeout: float = 60.0) -> Batch:
    deadline = time.monotonic() + timeout
    while True:
        b = c.batches.retrieve(batch_id)
        if b.status in ("completed", "failed", "cancelled", "expired"):
            return b
        assert time.monotonic() < deadline, f"batch still {b.status} after {timeout} s"
        time.sleep(0.05)


def lines_of(c: openai.OpenAI, file_id: str | None) -> list[dict]:  # type: ignore[type-arg]
    if file_id is None:
        return []
    return [orjson.loads(line) for line in c.files.content(file_id).content.splitlines()]


def test_upload_create_poll_download(gateway: Proc) -> None:
    c = client(gateway)
    data = jsonl(*(chat_line(f"q{i}", max_tokens=4) for i in range(30)))
    file = c.files.create(file=("questions.jsonl", data), purpose="batch")
    assert (file.bytes, file.filename, file.purpose) == (len(data), "questions.jsonl", "batch")
    assert c.files.content(file.id).content == data
    created = c.batches.create(
        input_file_id=file.id, endpoint=CHAT, completion_window="24h", metadata={"job": "eval"}
    )
    assert created.status == "validating" and created.metadata == {"job": "eval"}
    b = finished(c, created.id)
    assert b.status == "completed" and b.error_file_id is None and b.model == MODEL
    assert b.request_counts is not None and (b.request_counts.total, b.request_counts.completed) == (30, 30)
    assert b.in_progress_at and b.finalizing_at and b.completed_at
    out = lines_of(c, b.output_file_id)
    assert Counter(line["custom_id"] for line in out) == Counter(f"q{i}" for i in range(30))
    first = out[0]
    assert first["error"] is None and first["response"]["status_code"] == 200
    assert first["response"]["body"]["object"] == "chat.completion"
    completion_tokens = sum(line["response"]["body"]["usage"]["completion_tokens"] for line in out)
    assert b.usage is not None and b.usage.output_tokens == completion_tokens == 30 * 4
    assert c.files.retrieve(b.output_file_id).purpose == "batch_output"  # type: ignore[arg-type]
    assert created.id in [x.id for x in c.batches.list()]


def test_a_file_that_does_not_validate_fails_the_batch_before_any_line_runs(gateway: Proc) -> None:
    c = client(gateway)
    data = jsonl(
        chat_line("a"), chat_line("a"), chat_line("s", stream=True), chat_line("u", url="/v1/completions")
    )
    b = finished(
        c, c.batches.create(input_file_id=upload(c, data), endpoint=CHAT, completion_window="24h").id
    )
    assert b.status == "failed" and b.failed_at and b.output_file_id is None
    assert b.errors is not None and b.errors.data is not None
    assert [(e.code, e.line, e.param) for e in b.errors.data] == [
        ("duplicate_custom_id", 2, "custom_id"),
        ("unsupported_value", 3, "body.stream"),
        ("invalid_url", 4, "url"),
    ]


def test_lines_the_backend_refuses_go_to_the_error_file(gateway: Proc) -> None:
    c = client(gateway)
    too_long = [{"role": "user", "content": "x " * 2000}]  # over the backend's max_model_len
    data = jsonl(chat_line("ok", max_tokens=2), chat_line("big", messages=too_long))
    b = finished(
        c, c.batches.create(input_file_id=upload(c, data), endpoint=CHAT, completion_window="24h").id
    )
    assert b.status == "completed" and b.request_counts is not None
    assert (b.request_counts.completed, b.request_counts.failed) == (1, 1)
    [error] = lines_of(c, b.error_file_id)
    assert error["custom_id"] == "big" and error["response"]["status_code"] == 400
    assert "error" in error["response"]["body"]
    assert [line["custom_id"] for line in lines_of(c, b.output_file_id)] == ["ok"]


def test_cancel_stops_the_batch_and_every_line_is_answered_once(gateway: Proc, sim: Proc) -> None:
    c = client(gateway)
    data = jsonl(*(chat_line(f"c{i}", max_tokens=150, ignore_eos=True) for i in range(300)))
    input_id = upload(c, data)
    created = c.batches.create(input_file_id=input_id, endpoint=CHAT, completion_window="24h")
    deadline = time.monotonic() + 30
    while (b := c.batches.retrieve(created.id)).request_counts is None or b.request_counts.completed < 5:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(openai.BadRequestError) as in_use:
        c.files.delete(input_id)
    assert in_use.value.code == "file_in_use"
    assert c.batches.cancel(created.id).status in ("cancelling", "cancelled")
    b = finished(c, created.id)
    assert b.status == "cancelled" and b.cancelling_at and b.cancelled_at
    assert b.request_counts is not None and 5 <= b.request_counts.completed < 300
    out, errors = lines_of(c, b.output_file_id), lines_of(c, b.error_file_id)
    assert Counter(line["custom_id"] for line in out + errors) == Counter(f"c{i}" for i in range(300))
    assert {line["error"]["code"] for line in errors} == {"batch_cancelled"}
    assert len(out) == b.request_counts.completed
    state = httpx.get(f"{gateway.url}/admin/state").json()
    assert sum(x["inflight"] for x in state["backends"]) == 0  # aborted lines gave their slots back
    assert state["models"][MODEL]["background_depth"] == 0
    assert c.batches.cancel(created.id).status == "cancelled"  # again: nothing changes


def test_a_finished_batch_cannot_be_cancelled(gateway: Proc) -> None:
    c = client(gateway)
    file_id = upload(c, jsonl(chat_line("x", max_tokens=1)))
    b = finished(c, c.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h").id)
    with pytest.raises(openai.BadRequestError) as refused:
        c.batches.cancel(b.id)
    assert refused.value.code == "invalid_status"


def test_tenants_see_only_their_own_files_and_batches(gateway: Proc) -> None:
    a, b = client(gateway, "key-a"), client(gateway, "key-b")
    file_id = upload(a, jsonl(chat_line("x", max_tokens=1)))
    batch_id = a.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h").id
    for call in (
        lambda: b.files.retrieve(file_id),
        lambda: b.files.content(file_id),
        lambda: b.files.delete(file_id),
        lambda: b.batches.retrieve(batch_id),
        lambda: b.batches.cancel(batch_id),
        lambda: b.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h"),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert file_id not in [f.id for f in b.files.list()]
    assert batch_id not in [x.id for x in b.batches.list()]
    with pytest.raises(openai.AuthenticationError):
        client(gateway, "wrong").files.list()


def test_requests_the_api_refuses(gateway: Proc) -> None:
    c = client(gateway)
    with pytest.raises(openai.BadRequestError) as purpose:
        c.files.create(file=("in.jsonl", b"{}\n"), purpose="fine-tune")
    assert purpose.value.param == "purpose"
    with pytest.raises(openai.BadRequestError) as name:
        c.files.create(file=("in.csv", b"a,b\n"), purpose="batch")
    assert name.value.param == "file"
    with pytest.raises(openai.APIStatusError) as big:
        c.files.create(file=("in.jsonl", b"x" * (MAX_FILE + 1)), purpose="batch")
    assert big.value.status_code == 413
    file_id = upload(c, jsonl(chat_line("x")))
    for kwargs, param in (
        ({"endpoint": "/v1/responses", "completion_window": "24h"}, "endpoint"),
        ({"endpoint": CHAT, "completion_window": "soon"}, "completion_window"),
    ):
        with pytest.raises(openai.BadRequestError) as bad:
            c.batches.create(input_file_id=file_id, **kwargs)  # type: ignore[arg-type]
        assert bad.value.param == param
    with pytest.raises(openai.NotFoundError):
        c.batches.create(input_file_id="file-missing", endpoint=CHAT, completion_window="24h")
    with pytest.raises(openai.NotFoundError):
        c.batches.retrieve("batch_missing")


def test_files_list_pages_and_delete(gateway: Proc) -> None:
    c = client(gateway, "key-b")
    ids = [upload(c, jsonl(chat_line(str(i)))) for i in range(5)]
    page = c.files.list(limit=2, purpose="batch")
    assert [f.id for f in page.data] == ids[::-1][:2] and page.has_more
    assert [f.id for f in c.files.list(limit=2, purpose="batch")] == ids[::-1]  # the SDK follows pages
    assert [f.id for f in c.files.list(order="asc")] == ids
    deleted = c.files.delete(ids[0])
    assert deleted.deleted and deleted.id == ids[0]
    with pytest.raises(openai.NotFoundError):
        c.files.content(ids[0])


def test_metrics_count_batches_and_lines(gateway: Proc) -> None:
    c = client(gateway)
    file_id = upload(c, jsonl(*(chat_line(f"m{i}", max_tokens=4) for i in range(3))))
    b = finished(c, c.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h").id)
    assert b.status == "completed"
    text = httpx.get(f"{gateway.url}/metrics").text
    assert 'gateway_batches{status="completed"}' in text
    assert 'gateway_batch_lines_total{outcome="completed"}' in text
    assert 'gateway_batch_tokens_total{kind="completion"}' in text
    assert "gateway_batch_lines_pending" in text
    state = httpx.get(f"{gateway.url}/admin/state").json()["batches"]
    assert state["by_status"]["completed"] >= 1 and "tokens_per_second" in state


async def test_without_a_data_dir_the_routes_say_how_to_turn_them_on(tmp_path: Path) -> None:
    app = create_app(parse_config({"backends": ["http://127.0.0.1:9"]}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
        resp = await http.get("/v1/batches")
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "batch_api_disabled"
