"""Prompt counting and block hashing: shared prefixes share block ids, counts follow the rule."""

from __future__ import annotations

import pytest

from servesim.serve.prompts import CHARS_PER_TOKEN, PromptEncoder


def test_text_is_counted_by_the_rule_and_cut_in_blocks() -> None:
    enc = PromptEncoder(block_size=4)
    p = enc.encode_text("x" * 33)  # 33 characters: 9 tokens, 3 blocks of 4 tokens
    assert p.input_length == -(-33 // CHARS_PER_TOKEN) == 9
    assert len(p.hash_ids) == 3
    assert all(h >= 0 for h in p.hash_ids)


def test_shared_prefix_shares_leading_blocks_only() -> None:
    enc = PromptEncoder(block_size=2)
    a = enc.encode_ids(list(range(10)))
    b = enc.encode_ids(list(range(6)) + [99, 98, 97, 96])
    assert a.hash_ids[:3] == b.hash_ids[:3]
    assert a.hash_ids[3] != b.hash_ids[3]
    # A changed early block changes every later id (chained), so no false match further on.
    c = enc.encode_ids([7] + list(range(1, 10)))
    assert not set(c.hash_ids) & set(a.hash_ids)


def test_token_ids_count_exactly() -> None:
    p = PromptEncoder(block_size=16).encode_ids(list(range(100)))
    assert p.input_length == 100 and len(p.hash_ids) == 7


def test_chat_messages_are_joined() -> None:
    enc = PromptEncoder(block_size=16)
    one = enc.encode_chat([{"role": "user", "content": "hello there"}])
    parts = enc.encode_chat([{"role": "user", "content": [{"type": "text", "text": "hello there"}]}])
    assert one == parts
    with pytest.raises(ValueError, match="content"):
        enc.encode_chat([{"role": "user", "content": 5}])


def test_a_tokenizer_without_transformers_is_a_clear_error(monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_transformers(name, *args, **kwargs):
        if name == "transformers":
            raise ImportError("no transformers")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_transformers)
    with pytest.raises(ValueError, match="transformers"):
        PromptEncoder(16, tokenizer_path="/nonexistent")
