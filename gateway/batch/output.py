"""OpenAI's batch output and error line formats.

An answered request (any HTTP status) is one line
    {"id": "batch_req_...", "custom_id": ..., "response": {"status_code": 200, "request_id": ...,
     "body": {...}}, "error": null}
written to the output file when the status is 2xx and to the error file otherwise. A request that
got no HTTP answer (given up on after retries, or never run because its batch was cancelled or
expired) is one line with `"response": null` and `"error": {"code", "message"}` in the error file.

The body is spliced in as the bytes the backend sent when they are one line of JSON (re-encoded only
when they are not), so a line costs one parse (for `usage`) and no re-encoding.
"""

from __future__ import annotations

import orjson

from gateway.batch.model import new_id

BATCH_EXPIRED = ("batch_expired", "This request could not be executed before the completion window expired.")
BATCH_CANCELLED = ("batch_cancelled", "This request was not executed because the batch was cancelled.")
NOT_RUN = ("internal_error", "The gateway failed to run this request; its log says why.")
"""For a line still pending when its batch completes, which only an error in the gateway leaves."""


def answer_line(custom_id: str, status: int, request_id: str, body: bytes) -> tuple[bytes, int, int]:
    """The line, and the prompt and completion tokens of the body's `usage` (zeros when absent)."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        payload = None
        body = orjson.dumps(body.decode("utf-8", "replace"))
    else:
        if b"\n" in body or b"\r" in body:  # pretty-printed: one JSONL line needs it compact
            body = orjson.dumps(payload)
    head = orjson.dumps(
        {
            "id": new_id("batch_req_"),
            "custom_id": custom_id,
            "response": {"status_code": status, "request_id": request_id},
        }
    )
    # head ends with `}}`: the body goes in as the response's last member.
    line = head[:-2] + b',"body":' + body + b'},"error":null}\n'
    return (line, *_usage(payload))


def error_line(custom_id: str, code: str, message: str) -> bytes:
    return orjson.dumps(
        {
            "id": new_id("batch_req_"),
            "custom_id": custom_id,
            "response": None,
            "error": {"code": code, "message": message},
        },
        option=orjson.OPT_APPEND_NEWLINE,
    )


def _usage(payload: object) -> tuple[int, int]:
    found = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(found, dict):
        return 0, 0
    prompt, completion = found.get("prompt_tokens"), found.get("completion_tokens")
    return (
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )
