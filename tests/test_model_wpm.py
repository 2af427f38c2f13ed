"""The ``bert`` model (WordPiece): llama.cpp b11434's ids, pieces and detokenizer on bert-bge.

Expected ids are llama.cpp's (tests/data/bert-bge.jsonl.gz: ``llama_tokenize(add_special=false,
parse_special=...)``; llama.cpp's own vectors in tests/data/llama.cpp-tests), pieces its
``token_to_piece`` (bert-bge.dump.json.gz). add_special and the decoder follow llama-vocab.cpp's
WPM branches (``[CLS]`` ... ``[SEP]``; no leading space dropped; clean_spaces on).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.errors import VocabularyError
from bpetok.vocab.gguf import GGUFValueType, read_gguf
from bpetok.vocab.gguf_writer import items_of, write_gguf
from bpetok.models.wpm import preprocess
from helpers import LLAMA_TESTS, load_cases, read_vectors, wrong_cases
from model_cases import llama_detokenize, load_dump

BERT = LLAMA_TESTS / "ggml-vocab-bert-bge.gguf.gz"


@pytest.fixture(scope="module")
def bert() -> bpetok.Tokenizer:
    return bpetok.from_gguf(BERT)


@pytest.fixture(scope="module")
def cases() -> list[dict]:
    return load_cases("bert-bge")


def test_every_oracle_case_is_exact(bert, cases):
    wrong = wrong_cases(bert.encode, cases)
    assert len(cases) == 5800 and not wrong, wrong[:3]


def test_the_reference_path_is_exact(bert, cases):
    """The plain twin (codepoint by codepoint, no cache) on every third case."""
    wrong = wrong_cases(bert.encode_reference, cases[::3])
    assert not wrong, wrong[:3]


def test_the_fast_word_split_is_the_reference_one(bert, cases):
    model = bert.model
    texts = [c["text"] for c in cases[::2]] + ["\ue000x\U000f0000y\U00020000z\u0301\x00\ufffd", "A\u00c9\u01d6 \u2000b", "\ud800a\udfff"]
    for text in texts:
        assert model.words(text) == preprocess(text), text


def test_llama_cpp_vectors(bert):
    vectors = read_vectors("bert-bge")
    assert vectors
    for text, ids in vectors:
        assert bert.encode(text, parse_special=False) == ids, text


def test_pieces_are_llama_cpp_token_to_piece(bert):
    dump = load_dump("bert-bge")
    assert len(dump) == bert.n_tokens
    for token_id, (with_special, without_special) in dump.items():
        assert bert.piece(token_id) == with_special, token_id
        assert bert.token_bytes(token_id) == without_special, token_id


def test_decode_is_llama_detokenize(bert, cases):
    dump = load_dump("bert-bge")
    assert not bert.add_space_prefix and bert.clean_spaces
    for c in cases[::2]:
        for skip_special in (False, True):
            pieces = [dump[i][1 if skip_special else 0] for i in c["ids"]]
            expected = llama_detokenize(pieces, remove_space=False, clean_spaces=True)
            assert bert.decode_bytes(c["ids"], skip_special=skip_special) == expected, c["text"]


def test_round_trip_lowercases_and_splits(bert):
    ids = bert.encode("Hello, World! Don't")
    # llama.cpp keeps the first word's space; its clean-up joins " ' " back
    assert bert.decode(ids) == " hello, world! don't"


def test_add_special_wraps_in_cls_and_sep(bert):
    plain = bert.encode("hello world")
    assert bert.encode("hello world", add_special=True) == [101, *plain, 102]
    assert bert.encode("", add_special=True) == [101, 102]
    assert bert.encode_bytes(b"hello world", add_special=True) == [101, *plain, 102]
    assert bert.add_bos and bert.add_sep and not bert.add_eos


def test_add_special_ignores_the_flags_as_llama_cpp_does(tmp_path):
    """llama.cpp's WPM session pushes BOS and SEP whatever add_bos_token / add_sep_token say."""
    path = tmp_path / "flags.gguf"
    items = items_of(read_gguf(BERT)) + [
        ("tokenizer.ggml.add_bos_token", GGUFValueType.BOOL, False, None),
        ("tokenizer.ggml.add_sep_token", GGUFValueType.BOOL, False, None),
    ]
    write_gguf(path, items)
    tok = bpetok.from_gguf(path)
    assert tok.encode("hi", add_special=True) == [101, *tok.encode("hi"), 102]


def test_special_ids_and_eog(bert):
    ids = bert.special_ids
    assert (ids["bos"], ids["unk"], ids["sep"], ids["pad"], ids["mask"], ids["eos"]) == (101, 100, 102, 0, 103, None)
    # No EOS; "[PAD]" is one of llama.cpp's fill-in-the-middle pad texts, and fim_pad joins its EOG set.
    assert bert.eog_ids == frozenset({0})


def test_special_tokens_parse_only_with_parse_special(bert):
    assert bert.encode("a [SEP] b", parse_special=True) == [1037, 102, 1038]
    assert bert.encode("a [SEP] b", parse_special=False) == [1037, 1031, 19802, 1033, 1038]


def test_normalizer_keys_are_read(tmp_path):
    """tokenizer.ggml.normalizer.lowercase = false keeps case (and strip_accents follows it)."""
    path = tmp_path / "cased.gguf"
    write_gguf(path, items_of(read_gguf(BERT)) + [("tokenizer.ggml.normalizer.lowercase", GGUFValueType.BOOL, False, None)])
    tok = bpetok.from_gguf(path)
    assert not tok.model.lowercase and not tok.model.strip_accents
    assert tok.model.words("Héllo") == preprocess("Héllo", lowercase=False, strip_accents=False) == ["Héllo"]


def test_a_word_without_tokens_needs_an_unknown_token(tmp_path):
    items = [
        ("tokenizer.ggml.model", GGUFValueType.STRING, b"bert", None),
        ("tokenizer.ggml.tokens", GGUFValueType.ARRAY, [b"\xe2\x96\x81a", b"b"], GGUFValueType.STRING),
    ]
    path = tmp_path / "tiny.gguf"
    write_gguf(path, items)
    tok = bpetok.from_gguf(path)  # bert's default unk (100) is past 2 tokens: none
    assert tok.encode("ab a") == [0, 1, 0]
    with pytest.raises(VocabularyError, match="unknown token"):
        tok.encode("zz")


def test_cli_shows_the_model():
    env = {**os.environ}
    listed = subprocess.run([sys.executable, "-m", "bpetok.apps.cli", "list-models", "--json"], capture_output=True, text=True, env=env)
    assert listed.returncode == 0, listed.stderr
    names = {row["name"]: row for row in json.loads(listed.stdout)}
    assert names["bert"]["plugin"] == "bpetok.models.wpm" and names["t5"]["plugin"] == "bpetok.models.ugm"
    info = subprocess.run([sys.executable, "-m", "bpetok.apps.cli", "info", str(BERT), "--json"], capture_output=True, text=True, env=env)
    assert info.returncode == 0, info.stderr
    data = json.loads(info.stdout)
    assert data["model"] == "bert" and data["model_plugin"] == "bpetok.models.wpm" and data["add_sep"] is True
    assert data["n_tokens"] == 30522 and data["special_ids"]["sep"] == 102


any_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None), max_size=40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=any_text)
def test_fast_and_reference_agree_on_any_text(bert, text):
    assert bert.model.words(text) == preprocess(text)
    for parse_special in (False, True):
        assert bert.encode(text, parse_special=parse_special) == bert.encode_reference(text, parse_special=parse_special)


texts_with_specials = st.lists(
    st.one_of(any_text, st.sampled_from(["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", " [SEP] ", "[CLS"])), max_size=8
).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts_with_specials)
def test_text_with_special_tokens_is_the_reference_partition(bert, text):
    """The kernel's one call (``encode_cut``, cut by the specials' automaton) against the
    partition and the reference word split, fragment by fragment."""
    for parse_special in (False, True):
        assert bert.encode(text, parse_special=parse_special) == bert.encode_reference(text, parse_special=parse_special)


def test_invalid_utf8_becomes_u_fffd_which_the_normalizer_drops(bert):
    """llama.cpp decodes a byte that starts no sequence as U+FFFD, and preprocess drops U+FFFD."""
    assert bert.encode_bytes(b"hello \xffworld") == bert.encode("hello world")
    assert bert.encode_bytes(b"a\xe4\xb8b") == bert.encode("ab")


# -- the C kernel (bpetok/models/_wpm.c) against the readable twin ----------------------------------

def test_the_kernel_runs_unless_pure_python_is_asked_for(bert):
    from bpetok.compiled import compiled_module

    assert bert.model.compiled == (compiled_module("bpetok.models._wpm") is not None)


words_of_letters = st.lists(
    st.text(alphabet="aAbBeÉéèüßıİ\u0301\u00adxyz\u4e00\U00020000.,'-1 \t\u3000", min_size=1, max_size=8), max_size=30
).map(" ".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=words_of_letters)
def test_kernel_and_reference_agree_on_repeated_words(bert, text):
    """Words seen twice come from the kernel's word cache the second time."""
    model = bert.model
    assert model.encode_fragment(text + " " + text, True) == model.encode_fragment_reference(text + " " + text, True)


def test_kernel_and_reference_agree_on_a_cased_vocabulary(tmp_path, cases):
    path = tmp_path / "cased.gguf"
    write_gguf(path, items_of(read_gguf(BERT)) + [("tokenizer.ggml.normalizer.lowercase", GGUFValueType.BOOL, False, None)])
    model = bpetok.from_gguf(path).model
    for c in cases[::5]:
        assert model.encode_fragment(c["text"], True) == model.encode_fragment_reference(c["text"], True), c["text"]


def test_kernel_cuts_bytes_when_tokens_are_not_utf8(tmp_path):
    """A token that is no valid UTF-8 can still match where the word's bytes hold it."""
    items = [
        ("tokenizer.ggml.model", GGUFValueType.STRING, b"bert", None),
        ("tokenizer.ggml.tokens", GGUFValueType.ARRAY,
         [b"[UNK]", b"\xe2\x96\x81", b"\xc3", b"\xa9", b"\xe2\x96\x81a", b"a", b"\xe2"], GGUFValueType.STRING),
        ("tokenizer.ggml.unknown_token_id", GGUFValueType.UINT32, 0, None),
        ("tokenizer.ggml.normalizer.lowercase", GGUFValueType.BOOL, False, None),  # é stays é
    ]
    path = tmp_path / "bytes.gguf"
    write_gguf(path, items)
    model = bpetok.from_gguf(path).model
    assert model.text_ids is None
    for text in ("a é aé éa", "Éa b", "\u2581a", "ab ab"):
        assert model.encode_fragment(text, True) == model.encode_fragment_reference(text, True), text
    assert model.encode_fragment("aé", True) == [4, 2, 3]
    if model.compiled:  # tokens that cut é in two each span all of it (in characters and bytes)
        rows = model.fragment_span_rows("x aé")
        assert rows.tolist() == [[0, 0, 1, 0, 1], [4, 2, 3, 2, 3], [2, 3, 4, 3, 5], [3, 3, 4, 3, 5]]
        assert [tuple(r[:3]) for r in rows.tolist()] == model.fragment_spans("x aé")


def test_kernel_cache_is_bounded_and_optional(cases):
    texts = [c["text"] for c in cases[:400]]
    vocab = bpetok.from_gguf(BERT).vocabulary
    uncached = bpetok.Tokenizer(vocab, cache_bytes=0)
    expected = [uncached.encode(t) for t in texts]
    small = bpetok.Tokenizer(vocab, cache_bytes=400_000)
    assert [small.encode(t) for t in texts] == expected
    info = small.cache_info()["pieces"]
    assert 0 < info["bytes"] <= info["budget"] == 100_000 and info["entries"] > 0


def test_the_kernel_refuses_bad_tables():
    wpm = pytest.importorskip("bpetok.models._wpm")
    from array import array

    from bpetok.models.wpm import _kernel_tables

    tables = _kernel_tables(True, True)
    tokens = (b"a\xe2\x96\x81a", array("I", [0, 1, 5]), array("i", [8, 7]))  # "a", "▁a"
    assert wpm.Wpm(*tables, *tokens).encode("A aa", -1) == [7, 7, 8]
    assert wpm.Wpm(*tables, *tokens).encode("b", -1) is None  # no unknown token: the twin raises
    assert wpm.Wpm(*tables, *tokens).encode_with_spans("b", -1) is None
    rows = wpm.Wpm(*tables, *tokens).encode_with_spans("A bé", 9)  # an unknown id with no text spans its word
    assert list(memoryview(rows).cast("q")) == [7, 0, 1, 0, 1, 9, 2, 4, 2, 5]
    bad_tokens = [
        (b"a\xe2\x96\x81a", array("I", [0, 1, 6]), array("i", [8, 7])),  # past the blob
        (b"\xe2\x96\x81aa", array("I", [0, 4, 5]), array("i", [7, 8])),  # not sorted
        (b"aa", array("I", [0, 1, 2]), array("i", [7, 8])),  # twice
        (b"a\xe2\x96\x81a", array("I", [0, 1, 1, 5]), array("i", [8, 9, 7])),  # empty
        (b"a\xe2\x96\x81a", array("I", [0, 1, 5]), array("i", [8])),  # ids and offsets differ
        (b"a\xe2\x96\x81a", array("I", [0, 1, 5]), array("i", [8, -1])),  # negative id
        (b"a\xe2\x96\x81a", array("I", [0, 1, 5]), array("i", [8, 1 << 30])),  # absurd id
    ]
    for arrays in bad_tokens:
        with pytest.raises(ValueError):
            wpm.Wpm(*tables, *arrays)
    starts, codes, nfd, lower_from, lower_to, spaces, lowercase, strip = tables
    bad_tables = [
        (starts[::-1], codes, nfd, lower_from, lower_to, spaces),  # runs not increasing
        (starts, codes[1:], nfd, lower_from, lower_to, spaces),  # lengths differ
        (starts, codes, nfd[1:], lower_from, lower_to, spaces),  # not triples
        (starts, codes, array("I", [5, 4, 0]), lower_from, lower_to, spaces),  # empty range
        (starts, codes, array("I", [5, 6, 0x110000]), lower_from, lower_to, spaces),  # past Unicode
        (starts, codes, nfd, lower_from, lower_to[1:], spaces),  # lengths differ
        (starts, codes, nfd, lower_from, array("I", [0x110000] * len(lower_to)), spaces),  # past Unicode
    ]
    for arrays in bad_tables:
        with pytest.raises(ValueError):
            wpm.Wpm(*arrays, lowercase, strip, *tokens)


def test_the_kernel_refuses_bad_encode_cut_calls():
    """encode_cut and encode_cut_spans check their arguments as _cut_text.h does for the other
    kernels' encode_cut (the same messages)."""
    wpm = pytest.importorskip("bpetok.models._wpm")
    from array import array

    from bpetok.models.wpm import _kernel_tables

    kernel = wpm.Wpm(*_kernel_tables(True, True), b"a\xe2\x96\x81a", array("I", [0, 1, 5]), array("i", [8, 7]))
    for method in (kernel.encode_cut, kernel.encode_cut_spans):
        assert method(-1, None, None, "b", False) is None  # no unknown token: the Tokenizer's way says why
        with pytest.raises(TypeError, match=r"encode_cut\(\) takes 5 arguments \(4 given\)"):
            method(-1, None, None, "a")
        with pytest.raises(TypeError, match=r"encode_cut\(\) takes a str, not bytes"):
            method(-1, None, None, b"a", False)
        with pytest.raises(TypeError, match="Wpm is not initialised"):
            getattr(wpm.Wpm.__new__(wpm.Wpm), method.__name__)(-1, None, None, "a", False)
    assert kernel.encode_cut(9, None, None, "a b", False) == [7, 9]
    found = kernel.encode_cut_spans(9, None, None, "a bé", False)  # the spans, then the ids as int32
    assert list(memoryview(found)[:64].cast("q")) == [0, 1, 0, 1, 2, 4, 2, 5] and list(memoryview(found)[64:].cast("i")) == [7, 9]
