"""Up-front validation of a batch input file: OpenAI's error codes, lines and params."""

from __future__ import annotations

from pathlib import Path

from gateway.batch.lines import read_lines
from gateway.batch.validation import MAX_ERRORS, Validation, validate
from tests.batch.jsonl import CHAT, chat_line, jsonl


def run(tmp_path: Path, data: bytes, max_lines: int = 100) -> tuple[Validation, list[tuple[int, str, bytes]]]:
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    accepted: list[tuple[int, str, bytes]] = []

    def accept(number: int, custom_id: str, offset: int, length: int) -> None:
        accepted.append((number, custom_id, data[offset : offset + length]))

    return validate(read_lines(path), CHAT, max_lines, accept), accepted


def codes(result: Validation) -> list[tuple[str, str | None, int | None]]:
    return [(str(e["code"]), e["param"], e["line"]) for e in result.errors]  # type: ignore[misc]


def test_valid_lines_are_accepted_with_their_exact_bytes(tmp_path: Path) -> None:
    data = jsonl(chat_line("a"), chat_line("b")) + b"\n  \n" + jsonl(chat_line("c")).replace(b"\n", b"\r\n")
    result, accepted = run(tmp_path, data)
    assert result.ok and result.lines == 3 and result.model == "tiny-llama"
    assert [(n, cid) for n, cid, _ in accepted] == [(1, "a"), (2, "b"), (5, "c")]
    assert all(raw.startswith(b"{") and raw.endswith(b"}") for _, _, raw in accepted)


def test_each_kind_of_bad_line_is_reported_with_its_line_and_param(tmp_path: Path) -> None:
    no_model = chat_line("m")
    del no_model["body"]["model"]
    no_method = chat_line("n")
    del no_method["method"]
    data = jsonl(
        chat_line("a"),
        b"not json",
        b"[1, 2]",
        chat_line("a"),
        chat_line("u", url="/v1/embeddings"),
        chat_line("s", stream=True),
        chat_line("x", model="other"),
        {**chat_line("g"), "method": "GET"},
        no_model,
        no_method,
        {**chat_line("e"), "custom_id": ""},
        {**chat_line("b"), "body": "text"},
    )
    result, accepted = run(tmp_path, data)
    assert not result.ok
    assert codes(result) == [
        ("invalid_json_line", None, 2),
        ("invalid_json_line", None, 3),
        ("duplicate_custom_id", "custom_id", 4),
        ("invalid_url", "url", 5),
        ("unsupported_value", "body.stream", 6),
        ("mismatched_model", "body.model", 7),
        ("invalid_method", "method", 8),
        ("missing_required_parameter", "body.model", 9),
        ("missing_required_parameter", "method", 10),
        ("invalid_value", "custom_id", 11),
        ("invalid_value", "body", 12),
    ]
    assert all(isinstance(e["message"], str) and e["message"] for e in result.errors)
    assert [cid for _, cid, _ in accepted] == ["a"]  # nothing after the first error is accepted


def test_an_empty_file_and_too_many_lines_fail(tmp_path: Path) -> None:
    empty, _ = run(tmp_path, b"\n\n")
    assert codes(empty) == [("empty_file", None, None)]
    many, _ = run(tmp_path, jsonl(*(chat_line(str(i)) for i in range(4))), max_lines=3)
    assert codes(many) == [("too_many_lines", None, 4)]


def test_errors_are_listed_up_to_the_cap(tmp_path: Path) -> None:
    result, _ = run(tmp_path, b"x\n" * (MAX_ERRORS + 50), max_lines=10_000)
    assert len(result.errors) == MAX_ERRORS
