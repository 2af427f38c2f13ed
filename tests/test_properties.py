"""Property tests: round trips, pre-tokenizer coverage, encoding never raises."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.models.gpt2 import BYTE_TO_CHAR, ByteLevelModel
from bpetok.plugins import get_registry
from helpers import LLAMA_TESTS, sharing_bpe_models, with_pre

# Any Unicode scalar value (no surrogates), weighted towards the characters that split text.
scalar_text = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(list(" \t\n\r\v\f\u00a0\u3000\u2028'sStT0123456789²½١.,!?<>|")),
    ),
    max_size=60,
)
any_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None), max_size=60)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _bytes_have_tokens(tok, text: str) -> bool:
    """Every byte of the text has a fallback token (the model's ``byte_ids``: a token id, or
    None / a virtual id where the vocabulary has none), and no ``▁`` where the model writes
    spaces as ``▁`` (it decodes to a space)."""
    if tok.vocabulary.model != "gpt2" and "\u2581" in text:
        return False
    if tok.clean_spaces and re.search(r" [?!.,]| '", text):  # the detokenizer drops those spaces
        return False
    model = tok.model.bpe if isinstance(tok.model, ByteLevelModel) else tok.model  # byte-level: its merge tables
    byte_ids = model.byte_ids
    return all(byte_ids[b] is not None and byte_ids[b] < tok.n_tokens for b in text.encode("utf-8", "surrogatepass"))


@SETTINGS
@given(text=scalar_text)
def test_decode_inverts_encode(vocab_tokenizer, text):
    """decode(encode(s)) == s whenever every byte of s has a token (SmolLM2 lacks 21, which llama.cpp drops)."""
    _, tok = vocab_tokenizer
    if not _bytes_have_tokens(tok, text):
        return
    assert tok.decode(tok.encode(text, parse_special=False)) == text


def test_bytes_without_a_token_are_dropped_as_llama_cpp_does(smollm2):
    missing = [b for b in range(256) if smollm2.id(BYTE_TO_CHAR[b]) is None]
    assert len(missing) == 21
    # U+00A0 is C2 A0; 0xC2 has no token in SmolLM2, so only the A0 byte survives.
    lost = bytes([missing[0]]).decode("latin-1")
    assert smollm2.decode_bytes(smollm2.encode(f"a{lost}b", parse_special=False)).count(b"a") == 1


@SETTINGS
@given(text=any_text)
def test_encode_never_raises(vocab_tokenizer, text):
    """Any str, lone surrogates included: a surrogate becomes its three UTF-8-style bytes, as llama.cpp
    tokenizes those bytes (tests/test_live_llama.py compares with llama.cpp)."""
    _, tok = vocab_tokenizer
    for parse_special in (False, True):
        ids = tok.encode(text, parse_special=parse_special)
        assert all(0 <= i < tok.n_tokens for i in ids)
    if _bytes_have_tokens(tok, text):
        assert tok.decode_bytes(tok.encode(text, parse_special=False)) == text.encode("utf-8", "surrogatepass")


def test_lone_surrogate_becomes_its_bytes(qwen3):
    assert qwen3.decode_bytes(qwen3.encode("a\ud800b")) == b"a\xed\xa0\x80b"


# One row per registered spec: the names that share a spec split alike.
SPEC_ROWS = [row for row in get_registry().rows() if row.pre == row.spec.pre_names[0]]


@pytest.mark.parametrize("row", SPEC_ROWS, ids=lambda r: f"{r.model}/{r.pre}")
@SETTINGS
@given(text=any_text)
def test_every_registered_pretokenizer_covers_its_input(row, text):
    """Pieces of every installed pre-tokenizer, third-party ones included, concatenate to the input."""
    pieces = _pretokenizer(row).split(text)
    assert "".join(pieces) == text
    assert all(pieces)


_instances = {}


def _pretokenizer(row):
    if row.spec not in _instances:
        _instances[row.spec] = row.spec.factory()
    return _instances[row.spec]


# bpetok's own byte-level families (llama.cpp types); a plugin's spec may need a vocabulary of its
# own format, and the raw-UTF-8 ones one with <0xXX> tokens (below).
FAMILY_PRES = [row.pre for row in SPEC_ROWS if row.spec.llama_type and row.spec.byte_encode]


@pytest.fixture(scope="module")
def family_tokenizers():
    """A tokenizer per family, all on the qwen2 test vocabulary (every byte has a token)."""
    with sharing_bpe_models():
        vocab = bpetok.load_vocabulary(LLAMA_TESTS / "ggml-vocab-qwen2.gguf.gz")
        yield {pre: bpetok.tokenizer.from_vocabulary(with_pre(vocab, pre)) for pre in FAMILY_PRES}


@pytest.mark.parametrize("pre", FAMILY_PRES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=scalar_text)
def test_every_family_round_trips(family_tokenizers, pre, text):
    """Each family's pieces concatenate to the text, and their ids' bytes give the text back."""
    tok = family_tokenizers[pre]
    pieces = tok.model.pretokenizer.split(text)
    assert "".join(pieces) == text and all(pieces)
    ids = tok.encode(text, parse_special=False)
    assert b"".join(map(tok.token_bytes, ids)) == text.encode("utf-8")
    assert ids == tok.encode_reference(text, parse_special=False)


# -- the raw-UTF-8 types, on llama.cpp's Gemma 4 test vocabulary as a gpt2 model -------------------


@pytest.fixture(scope="module")
def raw_utf8_tokenizers(tmp_path_factory):
    from test_raw_utf8 import gemma4_as_gpt2

    folder = tmp_path_factory.mktemp("raw")
    return {pre: bpetok.from_gguf(gemma4_as_gpt2(folder / f"{pre}.gguf", pre)) for pre in ("gemma4", "mmbert", "sarvam-moe")}


@pytest.mark.parametrize("pre", ["gemma4", "mmbert", "sarvam-moe"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=scalar_text.filter(lambda t: "\u2581" not in t))
def test_raw_utf8_types_round_trip(raw_utf8_tokenizers, pre, text):
    """Every character has a token or <0xXX> tokens, so the pieces give the text back (spaces were
    ▁); mmbert's words put a ▁ before every line that does not start with one (llama.cpp gives
    " " one token of one space: tests/data/pretok-raw/mmbert.json.gz's detokenized cases all
    follow this rule)."""
    tok = raw_utf8_tokenizers[pre]
    expected = re.sub(r"[^\n]+", lambda m: m.group() if m.group()[0] == " " else " " + m.group(), text) if pre == "mmbert" else text
    ids = tok.encode(text, parse_special=False)
    assert b"".join(map(tok.token_bytes, ids)) == expected.encode("utf-8")
    assert tok.count(text, parse_special=False) == len(ids)
