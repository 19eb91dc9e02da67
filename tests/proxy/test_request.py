"""Reading a request: any bytes give a valid reading or a GatewayError in OpenAI's shape, nothing else.

Property tests (hypothesis) over the body parser and every header the gateway reads, plus the rules
each one enforces.
"""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import CREDENTIAL_HEADERS, MIN_PRIORITY
from gateway.proxy.errors import GatewayError
from gateway.proxy.json_cost import MAX_CONTAINERS, MAX_VALUES
from gateway.proxy.request import (
    MAX_MODEL_CHARS,
    MAX_REQUEST_ID,
    client_request_id,
    content_length,
    dropped_headers,
    json_object,
    parse_body,
    parse_priority,
    parse_request,
    parse_seconds,
    read_head,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def encoded(value: object) -> bytes:
    """JSON as a client might send it: big integers, NaN, lone surrogates and all."""
    return json.dumps(value).encode("utf-8", "surrogatepass")


bodies = st.one_of(
    st.binary(max_size=512),
    json_values.map(encoded),
    st.fixed_dictionaries(
        {"model": json_values | st.text(max_size=400), "stream": json_values},
        optional={"messages": json_values},
    ).map(encoded),
)
header_names = st.sampled_from(
    [
        b"content-length",
        b"authorization",
        b"x-request-id",
        b"x-priority",
        b"x-queue-timeout",
        b"x-session-id",
        b"cookie",
    ]
) | st.binary(min_size=1, max_size=16)
headers = st.lists(st.tuples(header_names, st.binary(max_size=300)), max_size=12)


def assert_openai_shaped(err: GatewayError) -> None:
    assert 400 <= err.status < 600
    body = orjson.loads(err.body())
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and isinstance(body["error"]["code"], str)
    assert len(err.body()) < 2_000  # nothing of unbounded size is echoed
    for name, value in err.headers():
        assert isinstance(name, bytes) and isinstance(value, bytes)


@settings(max_examples=400, deadline=None)
@given(bodies)
def test_any_body_is_a_model_or_an_openai_error(body: bytes) -> None:
    try:
        model, streaming, route = parse_request(body, session="s")
    except GatewayError as err:
        assert err.status == 400
        assert_openai_shaped(err)
    else:
        assert isinstance(model, str) and 0 < len(model) <= MAX_MODEL_CHARS
        assert isinstance(streaming, bool)
        assert all(isinstance(h, int) for h in route.chunks)  # routing reads any prompt it is given


@settings(max_examples=400, deadline=None)
@given(headers, st.integers(min_value=MIN_PRIORITY, max_value=1000))
def test_any_headers_read_or_give_an_openai_error(raw: list[tuple[bytes, bytes]], top: int) -> None:
    dropped = dropped_headers({b"authorization"}, (), ())
    head = read_head(raw, dropped)
    assert head.content_length >= -1
    assert 0 < len(head.request_id) <= MAX_REQUEST_ID and head.request_id.isascii()
    assert head.forward["x-request-id"] == head.request_id
    assert not any(name.encode("latin-1") in dropped for name in head.forward if name != "x-request-id")
    for parse in (lambda: parse_priority(head.priority, 0, top), lambda: parse_seconds(head.timeout)):
        try:
            value = parse()
        except GatewayError as err:
            assert err.status == 400
            assert_openai_shaped(err)
        else:
            assert value is None or isinstance(value, int | float)


def test_a_model_name_is_bounded() -> None:
    assert parse_request(orjson.dumps({"model": "m" * MAX_MODEL_CHARS}))[:2] == ("m" * MAX_MODEL_CHARS, False)
    with pytest.raises(GatewayError) as err:
        parse_request(orjson.dumps({"model": "m" * (MAX_MODEL_CHARS + 1), "stream": True}))
    assert (err.value.status, err.value.code, err.value.param) == (400, "model_too_long", "model")


def test_a_huge_content_length_reads_as_too_large_not_as_a_crash() -> None:
    head = read_head([(b"content-length", b"9" * 5000)], frozenset())
    assert head.content_length > 2**60


def test_request_ids_worth_keeping() -> None:
    assert client_request_id(b"abc-123_X.y") == "abc-123_X.y"
    for unfit in (b"", b"a" * (MAX_REQUEST_ID + 1), b"a b", b"caf\xe9", b"a\x00"):
        assert client_request_id(unfit) is None


def test_priority_may_be_lowered_or_chosen_up_to_the_tenant_maximum() -> None:
    assert parse_priority(None, 1, 3) == 1
    assert parse_priority(b"2", 1, 3) == 2
    assert parse_priority(b"1000", 1, 3) == 3
    assert parse_priority(b"-5", 1, 1) == -5
    assert parse_priority(b"-99999999999", 1, 1) == MIN_PRIORITY
    with pytest.raises(GatewayError):
        parse_priority(b"high", 0, 0)


def test_credentials_are_dropped_unless_passed() -> None:
    dropped = dropped_headers({b"host"}, ("X-Internal",), ("cookie",))
    assert b"host" in dropped and b"x-internal" in dropped and b"cookie" not in dropped
    assert CREDENTIAL_HEADERS - {b"cookie"} <= dropped


def test_a_body_that_could_hold_too_many_values_is_refused_before_parsing() -> None:
    ids = b'{"model": "m", "prompt": [' + b"1," * (MAX_VALUES - 10) + b"1]}"
    assert len(json_object(ids)["prompt"]) == MAX_VALUES - 9  # a 128K-token prompt passes
    for body in (
        b'{"model": "m", "prompt": [' + b"1," * MAX_VALUES + b"1]}",
        b'{"model": "m", "x": [' + b"[]," * MAX_CONTAINERS + b"[]]}",
    ):
        with pytest.raises(GatewayError) as info:
            json_object(body)
        assert info.value.status == 400 and info.value.code == "json_too_complex"
    assert content_length(b"0" * 5000 + b"12") == 12 and content_length(b"\xb2") == -1


@pytest.mark.parametrize(
    ("fields", "most"),
    [
        ({"max_tokens": 120}, 10 + 120),
        ({"max_completion_tokens": 64, "max_tokens": 500}, 10 + 64),  # the newer name first
        ({"max_tokens": True}, None),  # not a count
        ({"max_tokens": -1}, None),
        ({"max_tokens": 1.5}, None),
        ({}, None),  # the engine's own default: unknown here
    ],
)
def test_the_most_tokens_a_request_may_hold_is_its_prompt_and_max_tokens(
    fields: dict[str, object], most: int | None
) -> None:
    body = orjson.dumps({"model": "m", "prompt": "x" * 40, **fields})  # 40 characters: 10 tokens
    assert parse_body(body).most_tokens == most
