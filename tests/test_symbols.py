"""The C merge loop of the ``llama`` (SPM) and ``gemma4`` models (bpetok/models/_symbols.c) against
its readable twin, ``merge_symbols`` (bpetok/models/llama.py).

tests/test_exact.py holds the tokenizer (whichever engine runs) to llama.cpp; these tests hold the
C loop to the Python one on every reference text, on generated text and bytes, on long input and
across threads. The C module is imported
directly, so these run under BPETOK_PURE_PYTHON=1 too.
"""

from __future__ import annotations

import random
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.errors import BpetokError
from bpetok.vocab.gguf import read_gguf
from bpetok.vocab.gguf_writer import items_of, write_gguf
from bpetok.models import _symbols  # the suite requires the C modules to be built (CI builds them)
from bpetok.models.gemma4 import _NEWLINE_RUNS
from bpetok.models.llama import SPACE, merger_module
from helpers import BAICHUAN, GEMMA4, LLAMA_SPM, PHI3, load_cases, on_threads

PATHS = {"llama-spm": LLAMA_SPM, "phi-3": PHI3, "baichuan": BAICHUAN, "gemma-4": GEMMA4}
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", params=sorted(PATHS))
def model(request):
    """(name, tokenizer, its model's tables in the C module)."""
    tok = bpetok.from_gguf(PATHS[request.param])
    return request.param, tok, tok.model.build_merger(_symbols)


def units(tok, text: str) -> list[bytes]:
    """What the merge loop is handed: SPM the fragment, ▁ for spaces, with its space prefix;
    gemma4 each newline run and each run between newlines."""
    data = text.replace(" ", SPACE).encode("utf-8", "surrogatepass")
    if tok.vocabulary.model == "gemma4":
        return _NEWLINE_RUNS.findall(data)
    return [_SPACE_BYTES + data]


_SPACE_BYTES = SPACE.encode()


def python_ids(tok, data: bytes) -> list[int] | None:
    """The Python twin's ids, None where it refuses (a byte without a token)."""
    try:
        return tok.model._emit(data, tok.model.merge(data))
    except BpetokError:
        return None


def check_same(tok, merger, data: bytes) -> None:
    assert merger.spans(data) == tok.model.merge(data), data
    assert merger.encode(data) == python_ids(tok, data), data


def test_every_reference_text(model):
    name, tok, merger = model
    texts = list(dict.fromkeys(case["text"] for case in load_cases(name)))
    assert len(texts) > 2000
    for text in texts:
        for data in units(tok, text):
            check_same(tok, merger, data)


@SETTINGS
@given(text=st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None), max_size=80))
def test_generated_text(model, text):
    _, tok, merger = model
    for data in units(tok, text):
        check_same(tok, merger, data)


@SETTINGS
@given(data=st.binary(max_size=60))
def test_generated_bytes(model, data):
    """Invalid UTF-8 too: a symbol is as long as its first byte says, cut short at the end."""
    _, tok, merger = model
    check_same(tok, merger, data)


@pytest.mark.parametrize("text", ["a" * 1_000_000, "▁" * 300_000, "".join(random.Random(1).choices("abcdefgh日本語", k=1_000_000))])
def test_long_input(model, text):
    """1 MB of one character, or without a space: the heap keeps it O(n log n)."""
    _, tok, merger = model
    data = text.encode()
    ids = merger.encode(data)
    assert b"".join(map(tok.token_bytes, ids)) == data.replace(_SPACE_BYTES, b" ")
    head = data[:30_000]  # the Python twin is slower: a prefix (a whole character) stands for the rest
    while head and (head[-1] & 0xC0) == 0x80:
        head = head[:-1]
    check_same(tok, merger, head)


def test_long_input_through_the_tokenizer(model):
    _, tok, _ = model
    text = "x" * 1_000_000
    assert tok.decode(tok.encode(text, parse_special=False)) == text


def test_threads_share_one_merger(model):
    """The GIL is released while merging; the tables are read-only, so threads agree."""
    _, tok, merger = model
    rng = random.Random(7)
    inputs = ["".join(rng.choices("the quick brown fox é日本 ", k=rng.randrange(200, 3000))).encode() for _ in range(40)]
    expected = [merger.encode(data) for data in inputs]
    results = on_threads(lambda k: [merger.encode(data) for data in inputs])
    assert all(found == expected for found in results)


def test_spm_missing_byte_token_goes_to_python_which_says_so(tmp_path):
    """Without ``<0xFF>``, llama.cpp cannot tokenize a byte 0xFF: the C loop returns None and the
    Python twin raises the error that names it."""
    items = items_of(read_gguf(LLAMA_SPM))
    for i, (key, vtype, value, etype) in enumerate(items):
        if key == "tokenizer.ggml.tokens":
            tokens = list(value)
            tokens[tokens.index(b"<0xFF>")] = b"<0xff-gone>"
            items[i] = (key, vtype, tokens, etype)
    write_gguf(tmp_path / "no-ff.gguf", items)
    tok = bpetok.from_gguf(tmp_path / "no-ff.gguf")
    assert tok.model.build_merger(_symbols).encode(b"a\xff") is None
    with pytest.raises(BpetokError, match="byte 0xff"):
        tok.encode_bytes(b"a\xff")


def test_bad_tables_are_refused():
    none = [None] * 256
    empty = array("I")
    with pytest.raises(ValueError, match="256"):
        _symbols.Merger({}, empty, empty, empty, empty, 10, 5, [None] * 255, False)
    with pytest.raises(ValueError, match="byte id"):
        _symbols.Merger({}, empty, empty, empty, empty, 10, 5, [7] * 256, False)  # byte ids are tokens: < 5
    with pytest.raises(ValueError, match="unit id"):
        _symbols.Merger({b"a": 10}, empty, empty, empty, empty, 10, 5, none, False)
    with pytest.raises(ValueError, match="1 to 4 bytes"):
        _symbols.Merger({b"abcde": 1}, empty, empty, empty, empty, 10, 5, none, False)
    with pytest.raises(ValueError, match="merged id"):
        _symbols.Merger({}, array("I", [1]), array("I", [2]), array("I", [0]), array("I", [10]), 10, 5, none, False)
    with pytest.raises(ValueError, match="same length"):
        _symbols.Merger({}, array("I", [1]), empty, empty, empty, 10, 5, none, False)
    with pytest.raises(ValueError, match="n_tokens"):
        _symbols.Merger({}, empty, empty, empty, empty, 5, 10, none, False)
    with pytest.raises(TypeError, match="not initialised"):
        _symbols.Merger.__new__(_symbols.Merger).encode(b"a")
    merger = _symbols.Merger({b"a": 0, b"b": 1}, array("I", [0]), array("I", [1]), array("I", [0]), array("I", [2]), 3, 3, none, False)
    with pytest.raises(TypeError, match="bytes"):
        merger.encode("ab")
    assert merger.encode(b"abab") == [2, 2] and merger.encode(b"") == []
    assert merger.spans(b"abcab") == [(0, 2), (2, 1), (3, 2)]


def test_engine_follows_bpetok_pure_python(monkeypatch):
    monkeypatch.delenv("BPETOK_PURE_PYTHON", raising=False)
    assert bpetok.from_gguf(LLAMA_SPM).engine == "C kernel"
    monkeypatch.setenv("BPETOK_PURE_PYTHON", "1")
    tok = bpetok.from_gguf(LLAMA_SPM)
    assert tok.engine == "pure Python" and tok.model.merger() is None
    assert tok.encode("Hello world") == [15043, 3186]


def pieces_cache(tok) -> dict[str, int]:
    """The cache a model keeps in the Tokenizer's pieces budget: the C loop's words where it
    merges word by word, else the Tokenizer's pieces cache (fragments or lines)."""
    merger = tok.model.merger()
    if merger is not None and merger.words:  # one cache, not two: the words' is the one reported
        assert tok.cache_info()["pieces"] == merger.cache_info() and tok.model._cache.budget == 0
    return tok.cache_info()["pieces"]


@pytest.mark.parametrize("name", ["llama-spm", "gemma-4"])
def test_caches_keep_to_the_byte_budget(name):
    """Words or fragments (SPM) and lines (gemma4) are cached within the Tokenizer's pieces budget."""
    texts = [case["text"] for case in load_cases(name)][:1500]
    full = bpetok.from_gguf(PATHS[name])
    expected = [full.encode(t, parse_special=False) for t in texts]
    assert pieces_cache(full)["entries"] > 100
    for budget in (0, 20_000):
        tok = bpetok.Tokenizer(full.vocabulary, cache_bytes=budget)
        assert [tok.encode(t, parse_special=False) for t in texts] == expected
        info = pieces_cache(tok)
        assert info["bytes"] <= info["budget"] == budget // 4
        assert (info["entries"] > 0) == (budget > 0)


def test_tokenizer_encode_matches_its_reference(model):
    """The whole path (special tokens, space prefix, word and line caches, C loop) against
    ``encode_reference`` (no caches, the Python merge loop) on the special-token cases."""
    name, tok, _ = model
    cases = [case for case in load_cases(name) if case["special"]][:1500]
    for case in cases:
        assert tok.encode(case["text"]) == tok.encode_reference(case["text"]) == case["ids"]


def test_gemma4_tables_are_built_at_load(monkeypatch):
    """gemma4's 515k merges are read into the C tables by from_gguf, not by the first encode."""
    tok = bpetok.from_gguf(GEMMA4)
    if merger_module() is not None:
        assert tok.model.merger() is not None and "ranks" not in vars(tok.model)  # the Python loop's table: not needed
    monkeypatch.setattr(type(tok.model), "build_merger", lambda self, module: pytest.fail("built on first encode"))
    case = next(c for c in load_cases("gemma-4") if not c["special"] and len(c["text"]) > 20)
    assert tok.encode(case["text"], parse_special=False) == case["ids"]


def test_rank_merger_reads_merge_strings_as_the_python_loop():
    """The first of two equal merges keeps its rank; a merge with no space inside, or two, never applies."""
    none = [None] * 256
    index = {b"a": 0, b"b": 1, b"c": 2, b"ab": 3, b"bc": 4}
    merger = _symbols.rank_merger(index, [b"b c", b"a b", b"b c"], 5, none)
    assert merger.encode(b"abc") == [0, 4]  # "b c" at rank 0, not 2 (then "a b" would come first)
    merger = _symbols.rank_merger(index, [b" ab", b"ab ", b"abc", b"a b c", b"a b"], 5, none)
    assert merger.encode(b"abc") == [3, 2] and merger.spans(b"abab") == [(0, 2), (2, 2)]
    # a merged text that is no token (virtual) falls back to its bytes' tokens where it ends up final
    bytes_ids = [None] * 256
    bytes_ids[ord("c")] = 2
    merger = _symbols.rank_merger({b"c": 2}, [b"c c"], 3, bytes_ids)
    assert merger.encode(b"ccc") == [2, 2, 2] and merger.spans(b"ccc") == [(0, 2), (2, 1)]
    with pytest.raises(ValueError, match="merge 1 is not bytes"):
        _symbols.rank_merger(index, [b"a b", "b c"], 5, none)
    with pytest.raises(ValueError, match="token id"):
        _symbols.rank_merger({b"a": 9}, [b"a b"], 5, none)
    with pytest.raises(TypeError):
        _symbols.rank_merger(index, (b"a b",), 5, none)
