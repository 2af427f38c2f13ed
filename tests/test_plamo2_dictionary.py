"""plamo2's compiled best path (bpetok/models/_trie.c's ``Dictionary``) against its readable twin
(bpetok/models/plamo2.py's ``_best_path``) on small random vocabularies: tokens that share
prefixes, end inside one another and tie, over one- to four-byte characters, with scores that
stop the search (-1000: llama.cpp's unknown score) or are never taken (NaN, -2000).
Run on both engines (BPETOK_PURE_PYTHON=1 too: the twin against its own cut-and-cached form).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.models.plamo2 import Plamo2Model
from bpetok.vocab import TokenAttr
from helpers import DATA

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


@pytest.fixture(scope="module")
def synth() -> bpetok.Tokenizer:
    return bpetok.from_gguf(DATA / "more-models" / "ggml-vocab-plamo2-synth.gguf.gz")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.lists(st.one_of(st.text(max_size=12), st.sampled_from(["<|plamo:eos|>", "<|plamo:bos|>", "\ufeff", "\ufeffa",
                                                                       " the", "é", "\ud800"])), max_size=8).map("".join))
def test_one_call_is_the_partition(synth, text):
    """The text encoder (``Dictionary.encode_cut``: cuts from the automaton, each fragment's BOM
    dropped, the specials' ids too) gives what the partition and encode_fragment give."""
    encoder = synth._text_encoder
    if encoder is None:
        pytest.skip("the pure-Python engine has no one-call encoder")
    for parse_special in (False, True):
        ids = encoder(text, parse_special)
        expected = synth._encode_partitioned(synth._partition(text, parse_special)) if text else []
        if "\ud800" in text:
            assert ids is None  # no UTF-8: the Tokenizer partitions
        else:
            assert ids == expected == synth.encode_reference(text, parse_special=parse_special)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=40), scores=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=4, max_size=4))
def test_the_c_path_takes_any_bytes_and_scores(data, scores):
    """Hostile input: bytes that are no UTF-8, scores at int32's ends, a negative id: a list of
    ids, never a read past the arrays (scripts/sanitize_kernel.sh runs this under ASan)."""
    trie = pytest.importorskip("bpetok.models._trie")
    from array import array

    texts = [b"a\xff", b"\x80", b"\xc3", b"\xc3\xa9"]
    blob, offsets = b"".join(texts), array("Q", [0, 2, 3, 4, 6])
    dictionary = trie.Dictionary(blob, offsets, array("i", [7, -1, 9, 2**31 - 1]), array("i", scores), array("I", range(256)))
    ids = dictionary.best_path(data)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
