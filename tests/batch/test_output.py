"""OpenAI's batch output and error lines."""

from __future__ import annotations

import orjson

from gateway.batch.output import BATCH_EXPIRED, answer_line, error_line

BODY = b'{"id":"c1","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}'


def test_an_answer_line_carries_the_body_as_sent_and_its_usage() -> None:
    line, prompt, completion = answer_line("q1", 200, "req-1", BODY)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert BODY in line
    parsed = orjson.loads(line)
    assert parsed["custom_id"] == "q1" and parsed["error"] is None
    assert parsed["id"].startswith("batch_req_")
    assert parsed["response"] == {"status_code": 200, "request_id": "req-1", "body": orjson.loads(BODY)}
    assert (prompt, completion) == (7, 3)


def test_a_body_that_is_not_one_line_of_json_still_makes_one_valid_line() -> None:
    pretty = orjson.dumps(orjson.loads(BODY), option=orjson.OPT_INDENT_2)
    line, prompt, _ = answer_line("q", 200, "r", pretty)
    assert line.count(b"\n") == 1 and orjson.loads(line)["response"]["body"]["id"] == "c1" and prompt == 7
    text, prompt, completion = answer_line("q", 502, "r", b"Bad Gateway\n")
    assert orjson.loads(text)["response"]["body"] == "Bad Gateway\n" and (prompt, completion) == (0, 0)


def test_an_error_line_has_no_response() -> None:
    parsed = orjson.loads(error_line("q", *BATCH_EXPIRED))
    assert parsed["response"] is None and parsed["error"]["code"] == "batch_expired"
