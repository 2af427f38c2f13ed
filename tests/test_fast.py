"""The encode path against the plain reference: merge tables, the merge loop, space chunks, batches.

The pure-Python engine is the reference (``merge_symbols``, ``BytePairModel._build_ranks``,
``Tokenizer.encode_reference``); these tests hold the kernel (and the caches of either engine)
to it on the reference cases and on generated strings. tests/test_exact.py holds both to llama.cpp.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bpetok
import bpetok.tokenizer
from bpetok.models.gpt2 import BYTE_TO_CHAR, BytePairModel, merge_symbols
from bpetok.plugins import get_registry
from helpers import DATA, load_cases, read_inputs

# Atoms that exercise the pre-tokenizers' edges: space runs, other whitespace (ASCII,
# non-ASCII, and U+001C which Python calls whitespace and llama.cpp does not), contractions,
# digits of several scripts, letters with combining marks, CJK, emoji, punctuation, specials.
ATOMS = [
    " ", "  ", "   ", "\n", "\n\n", "\r\n", "\t", "\u3000", "\xa0", "\x1c", "\u2028",
    "a", "Z", "word", "Hello", "'s", "'LL", "1", "42", "\u0663", "\u00b2",
    "\u00e9", "e\u0301", "\u4e2d\u6587", "\u3053\u3093", "\u0436\u0438", "\U0001f600", "\U0001f44d\U0001f3fd",
    ".", ",", "(", "->", "...", "<|im_end|>", "<think>", "</s>", "\ufffd",
]
texts = st.one_of(st.lists(st.sampled_from(ATOMS), max_size=40).map("".join), st.text(max_size=60))


@pytest.fixture(scope="module", params=["qwen3", "smollm2"])
def tok(request, qwen3, smollm2) -> bpetok.Tokenizer:
    return {"qwen3": qwen3, "smollm2": smollm2}[request.param]


# -- merge tables --------------------------------------------------------------------------------


def test_merge_table_holds_every_merge(tok):
    bpe = tok.model.bpe
    assert bpe.ranks == bpe._build_ranks(tok.vocabulary.merges)
    assert len(bpe.ranks) > 40_000


def _byte_tokens() -> list[bytes]:
    return [c.encode() for c in BYTE_TO_CHAR]


@pytest.mark.parametrize(
    "merges, table, pieces",
    [
        # a duplicate keeps its first rank
        (["a b", "ab c", "a b"], {("a", "b"): (0, "ab"), ("ab", "c"): (1, "abc")}, ["abc"]),
        # no space: never matches
        (["a b", "x", "ab c"], {("a", "b"): (0, "ab"), ("ab", "c"): (2, "abc")}, ["abc"]),
        # two spaces: split at the first ("ab c" is no token: a virtual symbol)
        (["a b c", "a b"], {("a", "b c"): (0, "ab c"), ("a", "b"): (1, "ab")}, ["ab", "c"]),
    ],
)
def test_odd_merge_lists_build_as_llama_cpp_reads_them(merges, table, pieces):
    tokens = _byte_tokens() + [b"ab", b"abc", b"b c"]
    bpe = BytePairModel(tokens, [m.encode() for m in merges])
    symbol = lambda text: bpe._symbol_id(text.encode())  # noqa: E731
    expected = {symbol(a) * bpe.stride + symbol(b): rank << bpe.shift | symbol(m) for (a, b), (rank, m) in table.items()}
    assert bpe.ranks == expected
    assert bpe.encode_piece(b"abc") == [tokens.index(p.encode()) for p in pieces]


def test_a_merge_naming_a_missing_token_is_refused():
    with pytest.raises(bpetok.VocabularyError, match="not in 'tokenizer.ggml.tokens'"):
        BytePairModel(_byte_tokens(), [b"a q\xc3\xa9"])


# -- BPE loops -----------------------------------------------------------------------------------


def _symbols(bpe: BytePairModel, text: str) -> list[int]:
    return [bpe.byte_ids[b] for b in text.encode("utf-8", "surrogatepass")]


def _merge_by_scan(bpe: BytePairModel, symbols: list[int]) -> list[int]:
    """llama.cpp's rule in its plainest form: rescan every pair, merge the lowest, leftmost first."""
    never = 1 << 62
    while len(symbols) > 1:
        pairs = [bpe.ranks.get(a * bpe.stride + b, never) for a, b in zip(symbols, symbols[1:])]
        if min(pairs) == never:
            break
        i = pairs.index(min(pairs))
        symbols[i : i + 2] = [min(pairs) & bpe.mask]
    return symbols


@settings(max_examples=150, deadline=None)
@given(text=texts)
def test_merge_loop_equals_a_plain_rescan_on_generated_pieces(qwen3, text):
    bpe = qwen3.model.bpe
    assert merge_symbols(_symbols(bpe, text), bpe.ranks, bpe.stride, bpe.mask) == _merge_by_scan(bpe, _symbols(bpe, text))


@pytest.mark.parametrize("text", ["a" * 300, " " * 300, "\u4e2d\u6587\u5b57" * 70, "ab" * 150, "aab" * 99])
def test_long_pieces_merge_like_a_plain_rescan(qwen3, text):
    bpe = qwen3.model.bpe
    assert merge_symbols(_symbols(bpe, text), bpe.ranks, bpe.stride, bpe.mask) == _merge_by_scan(bpe, _symbols(bpe, text))


def test_a_merge_creating_a_lower_ranked_pair_is_taken_at_once():
    # "c d" -> "cd", then "b cd" is ranked *below* "c d": llama.cpp's queue takes "b cd" at
    # once, before the remaining "c d" merges.
    tokens = _byte_tokens() + [b"cd", b"bcd"]
    bpe = BytePairModel(tokens, [b"b cd", b"c d"])
    symbols = _symbols(bpe, "bcdcdbcd" * 10)
    assert bpe.encode_piece(b"bcdcdbcd" * 10) == _merge_by_scan(bpe, list(symbols))
    assert _merge_by_scan(bpe, list(symbols)).count(bpe.token_to_id[b"bcd"]) == 20


def test_a_megabyte_of_one_letter_merges_in_n_log_n(qwen3):
    # A heap, not a rescan per merge: 256 KB of one letter takes a second, not an hour.
    data = b"a" * (1 << 18)
    ids = qwen3.model.bpe.encode_piece(data)
    assert b"".join(map(qwen3.piece, ids)) == data
    assert ids == [qwen3.id(b"aaaaaaaa")] * (len(data) // 8)  # Qwen3's longest run of a's


# -- space chunks and the tokenizer --------------------------------------------------------------


def test_builtin_pretokenizers_offer_space_chunks():
    rows = {row.pre: row.spec for row in get_registry().rows()}
    assert all(rows[pre].space_chunks for pre in ("qwen2", "smollm", "llama-bpe", "gpt-2", "llama4", "deepseek-v3"))
    # bloom's pattern leaves a space after "." in the text between matches: no promise.
    assert not rows["bloom"].space_chunks


_split_by_spec = {}


def _assert_space_chunks_promise(text):
    # Cut at each space after a non-whitespace character, the pieces are the same.
    for row in get_registry().rows():
        if not row.spec.space_chunks:
            continue
        if row.spec not in _split_by_spec:
            _split_by_spec[row.spec] = row.spec.factory().split
        split = _split_by_spec[row.spec]
        parts = bpetok.models.gpt2.model._SAFE_SPACE.split(text)
        chunked = split(parts[0]) if parts[0] else []
        for part in parts[1:]:
            chunked += split(" " + part)
        assert chunked == split(text), (row.pre, text)


@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_space_chunks_promise_holds_for_every_registered_pretokenizer(text):
    _assert_space_chunks_promise(text)


def test_space_chunks_promise_holds_on_the_pre_tokenizer_cases():
    # Edge cases, fuzz from many scripts, prose and code (tests/data/pretok-cases.inp).
    for text in read_inputs(DATA / "pretok-cases.inp"):
        _assert_space_chunks_promise(text)


@pytest.mark.parametrize("special", [False, True])
def test_encode_equals_reference_on_reference_cases(tok, special):
    name = "qwen3" if tok.n_tokens > 100_000 else "smollm2"
    for case in load_cases(name)[::3]:
        assert tok.encode(case["text"], parse_special=special) == tok.encode_reference(case["text"], parse_special=special)


@settings(max_examples=200, deadline=None)
@given(text=texts, special=st.booleans())
def test_encode_equals_reference_on_generated_text(qwen3, smollm2, text, special):
    for tok in (qwen3, smollm2):
        expected = tok.encode_reference(text, parse_special=special)
        assert tok.encode(text, parse_special=special) == expected
        assert tok.encode(text, parse_special=special) == expected  # again, from the caches
        assert tok.count(text, parse_special=special) == len(expected)


def test_a_full_cache_still_encodes_exactly(qwen3):
    # Past its budget a cache stops growing (the kernel's chunk cache, the pure engine's piece
    # cache): new chunks or pieces then miss on every pass, among cached ones.
    text = "\n".join(c["text"] for c in load_cases("qwen3") if not c["special"])
    fresh = bpetok.Tokenizer(qwen3.vocabulary, qwen3.spec, cache_bytes=120_000)
    expected = qwen3.encode_reference(text, parse_special=False)
    assert fresh.encode(text, parse_special=False) == expected
    chunks = fresh.cache_info()["chunks" if fresh.model.compiled else "pieces"]
    assert chunks["budget"] / 2 < chunks["bytes"] <= chunks["budget"]
    assert fresh.encode(text, parse_special=False) == expected


def test_a_fresh_tokenizer_and_a_warm_one_agree(qwen3):
    text = "".join(random.Random(1).choice(ATOMS) for _ in range(5000))
    fresh = bpetok.Tokenizer(qwen3.vocabulary, qwen3.spec)
    assert fresh.encode(text) == qwen3.encode(text) == qwen3.encode_reference(text)


# -- count and encode_batch ----------------------------------------------------------------------


def test_count_equals_len_encode(qwen3):
    for case in load_cases("qwen3")[::7]:
        for special in (False, True):
            assert qwen3.count(case["text"], parse_special=special) == len(qwen3.encode(case["text"], parse_special=special))
    with pytest.raises(TypeError, match="count\\(\\) takes a str"):
        qwen3.count(b"bytes")


def test_encode_batch_in_process_preserves_order(qwen3):
    texts = [c["text"] for c in load_cases("qwen3")[:300]]
    assert qwen3.encode_batch(texts) == [qwen3.encode(t) for t in texts]
    assert qwen3.encode_batch(texts, parse_special=False, workers=1) == [qwen3.encode(t, parse_special=False) for t in texts]
    assert qwen3.encode_batch([]) == []


def test_encode_batch_on_threads_preserves_order(qwen3):
    texts = [c["text"] for c in load_cases("qwen3")]  # 2M characters: several of the kernel's parts
    for special in (False, True):
        assert qwen3.encode_batch(texts, parse_special=special, workers=2) == [
            qwen3.encode(t, parse_special=special) for t in texts
        ]


def test_encode_batch_rejects_bad_arguments(qwen3):
    with pytest.raises(ValueError, match="workers must be at least 1"):
        qwen3.encode_batch(["x"], workers=0)
    with pytest.raises(TypeError, match="str texts"):
        qwen3.encode_batch(["x", 3])
