"""The forms of state.redis_url: what each becomes, and a clear error for each mistake."""

from __future__ import annotations

import pytest

from gateway.coordination.url import DirectTarget, SentinelTarget, parse_redis_url, redacted


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://:secret@redis.example:6380",
        "rediss://user:secret@managed.example:6380/2?ssl_cert_reqs=required",
        "unix:///run/redis/redis.sock?db=1",
    ],
)
def test_direct_forms_pass_through(url: str) -> None:
    assert parse_redis_url(url) == DirectTarget(url)


def test_sentinel_form_lists_sentinels_service_db_and_credentials() -> None:
    target = parse_redis_url("rediss+sentinel://app:p%40ss@s1:26380,s2,[::1]:5000/mymaster/3")
    assert target == SentinelTarget(
        sentinels=(("s1", 26380), ("s2", 26379), ("::1", 5000)),
        service="mymaster",
        db=3,
        username="app",
        password="p@ss",
        tls=True,
    )
    assert parse_redis_url("redis+sentinel://s1/m") == SentinelTarget((("s1", 26379),), "m")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "must be a URL"),
        ("http://redis:6379", "unknown scheme 'http'"),
        ("redis://", "needs a host"),
        ("redis://h:99999", "port must be 1-65535"),
        ("redis://h:6379/zero", "database must be a number"),
        ("unix://", "socket path"),
        ("redis+sentinel://s1:26379", "service name"),
        ("redis+sentinel://s1:abc/m", "sentinel port must be a number"),
        ("redis+sentinel://s1,,s2/m", "every sentinel needs a host"),
        ("redis+sentinel://s1/m/0/x", "/service[/db]"),
    ],
)
def test_mistakes_are_named(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_redis_url(url)


def test_redacted_hides_passwords_only() -> None:
    assert redacted("redis://u:secret@h:1/0") == "redis://u:***@h:1/0"
    assert redacted("redis://h:1/0") == "redis://h:1/0"
