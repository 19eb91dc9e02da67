"""Up-front validation of a batch input file: every line is checked before any line runs.

A line is one JSON object `{"custom_id", "method", "url", "body"}` (OpenAI's batch input format,
which vLLM's offline `run-batch` also reads). A batch fails, with OpenAI's `errors` list (code,
message, param, 1-based line), when any line:
- is longer than MAX_LINE_BYTES (`line_too_large`: the default request body limit, which the line's
  request would meet when it runs) or could hold more values than the gateway parses at once
  (`json_too_complex`, gateway.proxy.json_cost): checked before the line is parsed;
- is not a JSON object (`invalid_json_line`);
- lacks `custom_id`, `method`, `url`, `body` or `body.model` (`missing_required_parameter`);
- repeats a `custom_id` of an earlier line (`duplicate_custom_id`): answers are matched to requests
  by it, so it must be unique;
- has a `method` other than POST (`invalid_method`) or a `url` other than the batch's endpoint
  (`invalid_url`): one batch is one endpoint;
- asks for `stream: true` (`unsupported_value`): a batch answer is a whole response body;
- names another model than the first line (`mismatched_model`): one batch is one model, as at
  OpenAI, so it is queued, limited and reported as one;
or when the file has no request (`empty_file`) or more than `max_lines` (`too_many_lines`).
Blank lines are skipped. At most `MAX_ERRORS` errors are listed; validation stops there. An error
quotes at most an excerpt of a value it rejects (gateway.proxy.errors.excerpt), so a batch's errors
stay a few kilobytes whatever its lines hold.

Pure: the caller reads the file and receives each valid line through `accept`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import orjson

from gateway.proxy.errors import excerpt
from gateway.proxy.json_cost import json_cost_problem

MAX_ERRORS = 100
MAX_LINE_BYTES = 16 * 1024 * 1024


@dataclass(slots=True)
class Validation:
    lines: int = 0
    model: str | None = None
    errors: list[dict[str, object]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


Accept = Callable[[int, str, int, int], None]
"""Called with (line number, custom_id, byte offset, byte length) for each valid line."""


def validate(
    lines: Iterable[tuple[int, int, bytes]], endpoint: str, max_lines: int, accept: Accept
) -> Validation:
    """Check (line number, byte offset, raw bytes) triples; valid ones go to `accept`."""
    result = Validation()
    seen: set[str] = set()
    for number, offset, raw in lines:
        if not raw.strip():
            continue
        result.lines += 1
        if result.lines > max_lines:
            _error(result, "too_many_lines", f"The file has more than {max_lines} requests.", None, number)
            break
        checked = _check(raw, endpoint, seen, result)
        if isinstance(checked, tuple):
            _error(result, *checked, number)
            if len(result.errors) >= MAX_ERRORS:
                break
        elif result.ok:
            accept(number, checked, offset, len(raw))
    if result.lines == 0:
        _error(result, "empty_file", "The input file contains no requests.", None, None)
    return result


def _check(
    raw: bytes, endpoint: str, seen: set[str], result: Validation
) -> str | tuple[str, str, str | None]:
    """The line's custom_id, or (code, message, param) of its first problem."""
    if len(raw) > MAX_LINE_BYTES:
        return "line_too_large", f"This line is over {MAX_LINE_BYTES} bytes.", None
    problem = json_cost_problem(raw)
    if problem is not None:
        return "json_too_complex", f"This line has {problem}.", None
    try:
        line = orjson.loads(raw)
    except orjson.JSONDecodeError:
        line = None
    if not isinstance(line, dict):
        return "invalid_json_line", "This line is not parseable as a JSON object.", None
    for name in ("custom_id", "method", "url", "body"):
        if name not in line:
            return "missing_required_parameter", f"Missing required parameter: '{name}'.", name
    custom_id, body = line["custom_id"], line["body"]
    if not isinstance(custom_id, str) or not custom_id:
        return "invalid_value", "custom_id must be a non-empty string.", "custom_id"
    if custom_id in seen:
        return (
            "duplicate_custom_id",
            f"The custom_id {excerpt(custom_id)} is a duplicate of an earlier line's; each request in a "
            "batch needs a unique custom_id.",
            "custom_id",
        )
    seen.add(custom_id)
    if line["method"] != "POST":
        return "invalid_method", f"method must be POST, got {excerpt(line['method'])}.", "method"
    if line["url"] != endpoint:
        return (
            "invalid_url",
            f"The url {excerpt(line['url'])} does not match the batch's endpoint {endpoint!r}.",
            "url",
        )
    if not isinstance(body, dict):
        return "invalid_value", "body must be a JSON object.", "body"
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return "missing_required_parameter", "Missing required parameter: 'body.model'.", "body.model"
    if body.get("stream") is True:
        return "unsupported_value", "Streaming is not supported in a batch: remove 'stream'.", "body.stream"
    if result.model is None:
        result.model = model
    elif model != result.model:
        return (
            "mismatched_model",
            f"The model {excerpt(model)} differs from {excerpt(result.model)} of the first line; "
            "a batch uses one model.",
            "body.model",
        )
    return custom_id


def _error(result: Validation, code: str, message: str, param: str | None, line: int | None) -> None:
    result.errors.append({"code": code, "message": message, "param": param, "line": line})
