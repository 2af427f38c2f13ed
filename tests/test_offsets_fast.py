"""The fast offsets path (running sums of the pieces' lengths, bpetok.offsets._spans_from_lengths)
held equal to its readable twin, the token-by-token walk (bpetok.offsets.offsets_by_walk), on
every llama.cpp reference case of every shipped vocabulary and on drawn texts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bpetok
from bpetok import offsets
from bpetok.errors import BpetokError
from bpetok.offsets import OffsetsError, offsets_by_walk, offsets_of_ids
from bpetok.vocab import TokenAttr
from helpers import VOCABS, load_cases

_tokenizers: dict[str, bpetok.Tokenizer] = {}


def tokenizer(name: str) -> bpetok.Tokenizer:
    if name not in _tokenizers:
        _tokenizers[name] = bpetok.from_gguf(VOCABS[name])
    return _tokenizers[name]


def walked(tok, text: str, parse_special: bool, add_special: bool):
    ids = tok.encode(text, parse_special=parse_special, add_special=add_special)
    return offsets_by_walk(tok, text, ids, add_special=add_special)


def assert_views_agree(found) -> None:
    """The arrays and the lists are the same spans."""
    assert found.char_spans.tolist() == [list(s) for s in found.offsets]
    assert found.byte_spans.tolist() == [list(s) for s in found.byte_offsets]
    assert found.partial_mask.tolist() == found.partial
    assert len(found) == len(found.ids)


@pytest.mark.parametrize("name", sorted(VOCABS))
def test_fast_path_equals_the_walk_on_every_reference_case(name):
    tok = tokenizer(name)
    for k, case in enumerate(load_cases(name)):
        text, parse_special, add_special = case["text"], case["special"], k % 2 == 1
        fast = tok.encode_with_offsets(text, parse_special=parse_special, add_special=add_special)
        assert fast == walked(tok, text, parse_special, add_special), text
        assert fast.ids == tok.encode(text, parse_special=parse_special, add_special=add_special)


@pytest.mark.parametrize("name", sorted(VOCABS))
def test_ids_brought_are_checked_and_give_the_same_spans(name):
    tok = tokenizer(name)
    for case in load_cases(name)[::20]:
        found = offsets_of_ids(tok, case["text"], case["ids"])
        assert found == tok.encode_with_offsets(case["text"], parse_special=case["special"])
        assert_views_agree(found)


def test_the_fast_path_is_what_runs(qwen3, monkeypatch):
    # the walk is only the fallback: text without dropped bytes never reaches it
    def refuse(*args, **kwargs):
        raise AssertionError("the walk ran")

    monkeypatch.setattr(offsets, "offsets_by_walk", refuse)
    found = qwen3.encode_with_offsets("Hi 🤗 there<|im_end|>\n日本語")
    assert found.ids == qwen3.encode("Hi 🤗 there<|im_end|>\n日本語")
    assert qwen3.encode_batch_with_offsets(["a b", "é🤗"]) == [qwen3.encode_with_offsets("a b"), qwen3.encode_with_offsets("é🤗")]


def test_a_dropped_byte_is_a_gap(smollm2):
    # smollm2 has no token for the byte 0x04: llama.cpp drops it, the fast path's sums fall short
    # of the text and the walk finds the gap
    assert smollm2.encode("\x04") == []
    found = smollm2.encode_with_offsets("a\x04b")
    assert found.byte_offsets == [(0, 1), (2, 3)] and found.offsets == [(0, 1), (2, 3)]
    assert found == walked(smollm2, "a\x04b", True, False)


def test_ids_of_another_text_are_refused(qwen3):
    with pytest.raises(OffsetsError, match="is not the text's bytes at byte 0"):
        offsets_of_ids(qwen3, "Hello", qwen3.encode("Jello"))  # same lengths: only the bytes differ
    with pytest.raises(BpetokError, match="out of range"):
        offsets_of_ids(qwen3, "Hello", [qwen3.n_tokens])
    spm = tokenizer("llama-spm")  # adds BOS
    with pytest.raises(OffsetsError, match="add_special=True wants"):
        offsets_of_ids(spm, "Hello", spm.encode("Hello"), add_special=True)


def test_spans_arrays_have_no_object_per_token(qwen3):
    found = qwen3.encode_with_offsets("Hello world, " * 100)
    assert found.byte_spans.dtype == np.int64 and found.byte_spans.shape == (len(found), 2)
    assert found.char_spans[-1, 1] == len("Hello world, " * 100)
    # reading the ids makes no tuple per token either: the span lists are made only when read
    assert found.ids == qwen3.encode("Hello world, " * 100) and found._lists is None
    assert found.offsets[-1][1] == len("Hello world, " * 100) and found._lists is not None


def special_texts(tok) -> list[str]:
    """A few special tokens' texts, those that swallow whitespace (LSTRIP/RSTRIP) among them."""
    attrs = tok.vocabulary.attrs
    special = [i for i in range(tok.n_tokens) if attrs[i] & (TokenAttr.CONTROL | TokenAttr.USER_DEFINED)]
    stripping = [i for i in special if attrs[i] & (TokenAttr.LSTRIP | TokenAttr.RSTRIP)]
    return [tok.piece(i).decode("utf-8", "replace") for i in special[:6] + stripping[:4]]


PIECES = ["a", "b", "Hello", " ", "  ", "\n", "\t", "é", "e\u0301", "🤗", "日本", "\x04", "\ud800", "'s", "123", "ß"]


@pytest.mark.parametrize("name", ["qwen3", "smollm2", "llama-spm", "phi-3", "gemma-4"])
def test_fast_path_equals_the_walk_on_drawn_texts(name):
    tok = tokenizer(name)
    alphabet = PIECES + special_texts(tok)

    @settings(max_examples=150, deadline=None)
    @given(st.lists(st.sampled_from(alphabet), max_size=12).map("".join), st.booleans(), st.booleans())
    def check(text, parse_special, add_special):
        fast = tok.encode_with_offsets(text, parse_special=parse_special, add_special=add_special)
        assert fast == walked(tok, text, parse_special, add_special)
        assert_views_agree(fast)

    check()
