"""A refusal's advised wait is read as the OpenAI SDK reads it, by Locust and the scenario client alike."""

from __future__ import annotations

import pytest

from loadtests.retry_after import retry_after_seconds


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"retry-after-ms": "1500", "retry-after": "2"}, 1.5),  # the precise header wins, as in the SDK
        ({"retry-after-ms": "soon", "retry-after": "2"}, 2.0),  # a bad one gives way to the other
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "-1"}, 0.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 1.0),
        ({}, None),
        (None, None),
    ],
)
def test_retry_after_is_read_like_the_openai_sdk(headers: dict[str, str] | None, wait: float | None) -> None:
    assert retry_after_seconds(headers) == wait
