"""Prompt rendering and chunk hash chains: equal prefixes give equal leading hashes, and only those."""

from __future__ import annotations

from gateway.routing.key import (
    CHUNK_CHARS,
    MAX_CHUNKS,
    READ_CHARS,
    RouteKey,
    chunk_hashes,
    render_chat,
    render_prompt,
    sequences,
)

SYSTEM = "You answer questions about the attached report. " * 40  # 1,960 characters


def leading_common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def chat_key(*turns: tuple[str, str]) -> RouteKey:
    return RouteKey(messages=[{"role": role, "content": content} for role, content in turns])


def test_whole_chunks_only_and_capped() -> None:
    assert chunk_hashes("x" * (CHUNK_CHARS - 1)) == ()
    assert len(chunk_hashes("x" * (3 * CHUNK_CHARS + 5))) == 3
    assert len(chunk_hashes("x" * (CHUNK_CHARS * (MAX_CHUNKS + 10)))) == MAX_CHUNKS


def test_chain_hash_names_the_whole_prefix() -> None:
    a = chunk_hashes("a" * CHUNK_CHARS + "b" * CHUNK_CHARS)
    b = chunk_hashes("c" * CHUNK_CHARS + "b" * CHUNK_CHARS)
    assert a[0] != b[0]
    assert a[1] != b[1]  # the same second chunk after another first one is another prefix


def test_next_turn_extends_the_previous_turns_chain() -> None:
    turn1 = chat_key(("system", SYSTEM), ("user", "What does the report say about Q3?"))
    turn2 = chat_key(
        ("system", SYSTEM),
        ("user", "What does the report say about Q3?"),
        ("assistant", "Revenue rose by a tenth. " * 12),
        ("user", "And Q4?"),
    )
    assert len(turn2.chunks) > len(turn1.chunks) > 0
    assert turn2.chunks[: len(turn1.chunks)] == turn1.chunks


def test_another_system_prompt_shares_nothing_and_another_question_shares_the_system_prompt() -> None:
    base = chat_key(("system", SYSTEM), ("user", "first question " * 20))
    other_system = chat_key(("system", SYSTEM.upper()), ("user", "first question " * 20))
    other_question = chat_key(("system", SYSTEM), ("user", "second question " * 20))
    assert leading_common(base.chunks, other_system.chunks) == 0
    # Every chunk that ends inside the shared system message (after "system\0") is shared.
    assert (
        leading_common(base.chunks, other_question.chunks) == (len("system\x00") + len(SYSTEM)) // CHUNK_CHARS
    )


def test_roles_and_message_boundaries_are_part_of_the_text() -> None:
    assert render_chat([{"role": "user", "content": "ab"}]) != render_chat(
        [{"role": "system", "content": "ab"}]
    )
    one = render_chat([{"role": "user", "content": "ab"}])
    two = render_chat([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert one != two


def test_content_parts_and_completion_prompts() -> None:
    parts = [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]
    assert render_chat([{"role": "user", "content": parts}]) == render_chat(
        [{"role": "user", "content": "hello world"}]
    )
    image = {"type": "image_url", "image_url": {"url": "http://x/cat.png"}}
    assert "cat.png" in render_chat([{"role": "user", "content": [image]}])
    assert render_prompt("once upon a time") == "once upon a time"
    assert render_prompt(["first", "second"]) == "first"
    assert render_prompt([1, 2, 3]) == "1,2,3"
    assert render_prompt(None) == ""


def test_session_from_header_else_user_field() -> None:
    body = {"model": "m", "messages": [], "user": "u-1"}
    assert RouteKey.from_body(body).session == RouteKey(session="u-1").session
    assert RouteKey.from_body(body, "s-9").session == RouteKey(session="s-9").session
    assert RouteKey(session="u-1").session != RouteKey(session="s-9").session
    assert RouteKey.from_body({"model": "m", "prompt": "x", "user": ""}).session is None


def test_a_session_id_is_held_as_one_integer_whatever_its_length() -> None:
    key = RouteKey.from_body({"model": "m", "prompt": "x", "user": "u" * (1 << 20)})
    assert isinstance(key.session, int)


def test_tenants_and_cache_salts_share_no_chunks_and_no_sessions() -> None:
    body = {"model": "m", "prompt": SYSTEM, "user": "u-1"}
    a = RouteKey.from_body(body, tenant="a")
    assert a.chunks == RouteKey.from_body(body, tenant="a").chunks and len(a.chunks) == 7
    others = [
        RouteKey.from_body(body, tenant="b"),
        RouteKey.from_body({**body, "cache_salt": "s"}, tenant="a"),
    ]
    for other in others:
        assert leading_common(a.chunks, other.chunks) == 0 and a.session != other.session


def test_the_rendering_reads_only_what_may_be_hashed() -> None:
    huge_ids = [123456] * 8_000_000
    assert READ_CHARS <= len(render_prompt(huge_ids)) < READ_CHARS + 16
    assert RouteKey(prompt=huge_ids).chunks == RouteKey(prompt=huge_ids[:20_000]).chunks
    many = [{"role": "user", "content": "hello there"}] * 1_000_000
    assert READ_CHARS <= len(render_chat(many)) < READ_CHARS + 64
    parts = [{"type": "text", "text": "hello there"}] * 1_000_000
    assert READ_CHARS <= len(render_chat([{"role": "user", "content": parts}])) < READ_CHARS + 64


def test_embeddings_and_short_prompts_have_no_chunks() -> None:
    assert RouteKey.from_body({"model": "m", "input": "x" * 5000}).chunks == ()
    assert RouteKey.from_body({"model": "m", "prompt": "short"}).chunks == ()
    assert len(RouteKey.from_body({"model": "m", "prompt": "p" * 600}).chunks) == 2


def test_sequences_count_n_best_of_and_prompts() -> None:
    assert sequences({"model": "m", "prompt": "x"}) == 1
    assert sequences({"model": "m", "prompt": "x", "n": 4}) == 4
    assert sequences({"model": "m", "prompt": "x", "n": 2, "best_of": 5}) == 5
    assert sequences({"model": "m", "prompt": ["a", "b", "c"], "n": 2}) == 6
    assert sequences({"model": "m", "prompt": [1, 2, 3]}) == 1  # one prompt of token ids
    assert sequences({"model": "m", "input": ["a", "b"]}) == 2
    assert sequences({"model": "m", "prompt": "x", "n": True}) == 1
    assert sequences({"model": "m", "prompt": "x", "n": 10**9}) == 1024
    assert RouteKey.from_body({"model": "m", "messages": [], "n": 3}).sequences == 3
