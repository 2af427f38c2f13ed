"""bpetok's fast encode path (space chunks, caches) agrees with its plain one on llama3's rules."""

from __future__ import annotations

import re

from hypothesis import given, settings, strategies as st

import bpetok_llama3

ATOMS = st.sampled_from(
    [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\x1c", "a", "Việt", "word", "'s", "'LL", "'", ",", "!!",
     "1", "1234567", "١٢٣٤", "½", "\u0301", "👍🏽", "<|eot_id|>", "<|begin_of_text|>", "é", "中文"]
)
TEXTS = st.one_of(st.lists(ATOMS, max_size=30).map("".join), st.text(max_size=40))


@settings(max_examples=300, deadline=None)
@given(text=TEXTS)
def test_space_chunks_promise(text):
    # Cut at every space that follows a non-space: the pieces must not change.
    pre = bpetok_llama3.make_pretokenizer()
    assert pre.space_chunks
    parts = re.split(r"(?<=\S) ", text)
    chunked = pre.split(parts[0]) if parts[0] else []
    for part in parts[1:]:
        chunked += pre.split(" " + part)
    assert chunked == pre.split(text)


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, special=st.booleans())
def test_fast_encode_equals_reference(llama_bpe, text, special):
    expected = llama_bpe.encode_reference(text, parse_special=special)
    assert llama_bpe.encode(text, parse_special=special) == expected
    assert llama_bpe.encode(text, parse_special=special) == expected  # again, from the caches
