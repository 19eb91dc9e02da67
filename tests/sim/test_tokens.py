"""Token accounting: prompt lengths, and prefix-block hashes that depend only on what comes before."""

from __future__ import annotations

from gateway.sim import tokens
from gateway.sim.profiles import get_profile

GPU = get_profile("llama3-8b-h100")  # 4 bytes per token, blocks of 16


def chat_hashes(messages: list[tuple[str, str]]) -> tuple[int, list[int]]:
    n, rendered = tokens.chat_prompt(messages, GPU)
    return n, tokens.block_hashes(rendered, n, GPU.block_size)


def shared(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def test_chat_token_count_is_contents_plus_template() -> None:
    n, _ = tokens.chat_prompt([("system", "x" * 10), ("user", "y" * 7)], GPU)
    assert n == 5 + 2 * GPU.chat_tokens_per_message + GPU.chat_tokens_base  # ceil(17 / 4) content


def test_next_turn_of_a_conversation_shares_every_full_block_of_the_history() -> None:
    turn1 = [("system", "You are terse. " * 500), ("user", "What is a KV cache?")]
    turn2 = [*turn1, ("assistant", "Memory of past tokens. " * 6), ("user", "And a block?")]
    n1, h1 = chat_hashes(turn1)
    n2, h2 = chat_hashes(turn2)
    assert n2 > n1 and len(h1) == n1 // 16
    # Every full block before turn 1's closing template marker (the assistant header) is shared.
    assert shared(h1, h2) == (n1 - GPU.chat_tokens_base) // 16
    # Another user's question after the same system prompt: the blocks before the user's words.
    other = [turn1[0], ("user", "What is a paged KV cache?")]
    before_question = 2 * GPU.chat_tokens_per_message + len(turn1[0][1]) // 4
    assert shared(h1, chat_hashes(other)[1]) == before_question // 16


def test_one_document_with_two_questions_shares_the_document_blocks() -> None:
    doc = "The quarterly report says revenue grew. " * 100  # 4,000 bytes: 1,000 tokens
    n1, r1 = tokens.text_prompt(doc + "Who wrote it?", GPU)
    n2, r2 = tokens.text_prompt(doc + "What grew, and by how much, this quarter?", GPU)
    h1 = tokens.block_hashes(r1, n1, 16)
    h2 = tokens.block_hashes(r2, n2, 16)
    assert shared(h1, h2) == 1000 // 16  # every block that ends inside the document


def test_different_prompts_share_nothing() -> None:
    _, h1 = chat_hashes([("user", "a" * 400)])
    _, h2 = chat_hashes([("user", "b" * 400)])
    assert h1 and shared(h1, h2) == 0


def test_token_ids_hash_per_id() -> None:
    ids = list(range(40))
    n1, r1 = tokens.ids_prompt(ids)
    n2, r2 = tokens.ids_prompt([*ids[:32], 999, *ids[33:]])
    h1, h2 = tokens.block_hashes(r1, n1, 16), tokens.block_hashes(r2, n2, 16)
    assert len(h1) == 2 and shared(h1, h2) == 2  # id 32 is the first of the third, partial block
    n3, r3 = tokens.ids_prompt([*ids[:20], 999, *ids[21:]])
    assert shared(h1, tokens.block_hashes(r3, n3, 16)) == 1
