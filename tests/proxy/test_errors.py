"""Error answers in OpenAI's shape, with the retry headers the OpenAI SDK reads."""

from __future__ import annotations

import orjson

from gateway.proxy.errors import GatewayError


def test_a_shed_answer_carries_the_three_retry_headers() -> None:
    err = GatewayError(429, "full", "queue_full", retry_after=2.345, should_retry=True)
    assert dict(err.headers()) == {
        b"content-type": b"application/json",
        b"retry-after": b"3",
        b"retry-after-ms": b"2345",
        b"x-should-retry": b"true",
    }
    assert orjson.loads(err.body()) == {
        "error": {"message": "full", "type": "rate_limit_error", "param": None, "code": "queue_full"}
    }


def test_advice_never_to_retry_and_no_estimate() -> None:
    late = GatewayError(503, "slow", "queue_timeout", retry_after=0.0004, should_retry=False)
    headers = dict(late.headers())
    assert headers[b"retry-after"] == b"1" and headers[b"retry-after-ms"] == b"1"
    assert headers[b"x-should-retry"] == b"false"
    assert orjson.loads(late.body())["error"]["type"] == "service_unavailable_error"
    plain = GatewayError(400, "bad", "invalid_json", param="messages")
    assert dict(plain.headers()) == {b"content-type": b"application/json"}
    assert orjson.loads(plain.body())["error"]["param"] == "messages"
