"""plamo2's compiled best path (bpetok/models/_trie.c's ``Dictionary``) against its readable twin
(bpetok/models/plamo2.py's ``_best_path``) on small random vocabularies: tokens that share
prefixes, end inside one another and tie, over one- to four-byte characters, with scores that
stop the search (-1000: llama.cpp's unknown score) or are never taken (NaN, -2000).
Run on both engines (BPETOK_PURE_PYTHON=1 too: the twin against its own cut-and-cached form).
"""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from bpetok.models.plamo2 import Plamo2Model
from bpetok.vocab import TokenAttr

ALPHABET = ["a", "b", " ", "é", "€", "\U0001d11e", "\ud800"]  # 1-4 UTF-8 bytes, and a lone surrogate
SCORES = [0.0, -1.0, -1.5, -2.0, -1000.0, -2000.0, 1.0, float("nan")]


def model_of(pieces: list[tuple[str, float]]) -> Plamo2Model:
    """A plamo2 model of an unknown token, 256 byte tokens (byte b: id b + 1), then ``pieces``
    (texts repeat: the last id wins)."""
    tokens = [b"<unk>"] + [b"<0x%02X>" % b for b in range(256)] + [t.encode("utf-8", "surrogatepass") for t, _ in pieces]
    attrs = [TokenAttr.UNKNOWN] + [TokenAttr.BYTE] * 256 + [TokenAttr.NORMAL] * len(pieces)
    scores = [0.0] * 257 + [s for _, s in pieces]
    return Plamo2Model(SimpleNamespace(path="random", tokens=tokens, attrs=attrs, scores=scores, n_tokens=len(tokens)))


texts = st.lists(st.sampled_from(ALPHABET), max_size=24).map("".join)


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.tuples(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=5).map("".join),
                                 st.sampled_from(SCORES)), max_size=30),
       text=texts)
def test_the_best_path_is_the_twins(pieces, text):
    model = model_of(pieces)
    assert model.encode_fragment(text, True) == model.encode_fragment_reference(text, True)


@settings(max_examples=100, deadline=None)
@given(text=texts)
def test_a_vocabulary_of_bytes_only_spells_each_character(text):
    model = model_of([])
    expected = [b + 1 for c in text.replace("\ufeff", "") for b in c.encode("utf-8", "surrogatepass")]
    assert model.encode_fragment(text, True) == model.encode_fragment_reference(text, True) == expected
