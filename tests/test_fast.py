"""The fast encode path against the plain reference: merge tables, BPE loops, space chunks, batches.

Every optimisation keeps a readable twin (``BytePairModel.merge_symbols``, ``_build_ranks_reference``,
``Tokenizer.encode_reference``); these tests hold the fast code to it on the reference cases and
on generated strings. tests/test_exact.py holds both to llama.cpp.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bpetok
import bpetok.tokenizer
from bpetok.models.gpt2 import BYTE_TO_CHAR, BytePairModel
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


def test_fast_merge_table_equals_reference(tok):
    bpe = tok.model.bpe
    assert bpe.ranks == bpe._build_ranks_reference(tok.vocabulary.merges)
    assert len(bpe.ranks) > 40_000


def _byte_tokens() -> list[bytes]:
    return [c.encode() for c in BYTE_TO_CHAR]


@pytest.mark.parametrize(
    "merges",
    [
        ["a b", "ab c", "a b"],  # a duplicate keeps its first rank
        ["a b", "x", "ab c"],  # no space: never matches
        ["a b c", "a b"],  # two spaces: split at the first
    ],
)
def test_odd_merge_lists_build_like_the_reference(merges):
    tokens = _byte_tokens() + [b"ab", b"abc", b"b c"]
    bpe = BytePairModel(tokens, [m.encode() for m in merges])
    assert bpe.ranks == bpe._build_ranks_reference([m.encode() for m in merges])
    assert bpe.encode_piece(b"abc") == bpe.encode_piece_reference(b"abc")


def test_a_merge_naming_a_missing_token_is_refused_by_the_fast_builder_too():
    with pytest.raises(bpetok.VocabularyError, match="not in 'tokenizer.ggml.tokens'"):
        BytePairModel(_byte_tokens(), [b"a q\xc3\xa9"])


# -- BPE loops -----------------------------------------------------------------------------------


def _symbols(bpe: BytePairModel, text: str) -> list[int]:
    return [bpe.byte_ids[b] for b in text.encode("utf-8", "surrogatepass")]


@pytest.mark.parametrize("name", ["qwen3", "smollm2"])
def test_fast_bpe_equals_reference_on_every_reference_piece(name, qwen3, smollm2):
    tok = {"qwen3": qwen3, "smollm2": smollm2}[name]
    pieces = {p for case in load_cases(name) for p in tok.model.pretokenizer.split(case["text"])}
    assert len(pieces) > 5000
    bpe = tok.model.bpe
    for piece in pieces:
        data = piece.encode("utf-8", "surrogatepass")
        assert bpe.encode_piece(data) == bpe.encode_piece_reference(data), piece
        assert bpe._merge_long(_symbols(bpe, piece)) == bpe.merge_symbols(_symbols(bpe, piece)), piece


@pytest.mark.parametrize("name", ["qwen3", "smollm2"])
def test_batched_bpe_equals_reference_on_every_reference_piece(name, qwen3, smollm2):
    tok = {"qwen3": qwen3, "smollm2": smollm2}[name]
    pieces = sorted({p.encode("utf-8", "surrogatepass") for case in load_cases(name) for p in tok.model.pretokenizer.split(case["text"])})
    assert tok.model.bpe.encode_pieces(pieces) == [tok.model.bpe.encode_piece_reference(p) for p in pieces]


def test_batch_hash_table_agrees_with_the_merge_dict(tok):
    import numpy as np
    bpe = tok.model.bpe
    tables = bpe._batch_tables()
    keys = list(bpe.ranks)
    rng = random.Random(3)
    absent = [rng.randrange(bpe.stride * bpe.stride) for _ in range(20_000)]
    absent = [k for k in absent if k not in bpe.ranks]
    found = bpe._pair_ranks(tables, np.array(keys + absent, np.int64)).tolist()
    ranks = [(bpe.ranks[k] >> bpe.shift) << tables.rank_shift for k in keys]
    assert found == ranks + [tables.never] * len(absent)


def test_a_batch_too_large_for_one_pass_is_cut_in_parts(qwen3, monkeypatch):
    split = qwen3.model.pretokenizer.split
    pieces = sorted({p.encode("utf-8", "surrogatepass") for case in load_cases("qwen3") for p in split(case["text"])})
    monkeypatch.setattr(BytePairModel, "_BATCH_BYTES", 1000)
    assert qwen3.model.bpe.encode_pieces(pieces) == [qwen3.model.bpe.encode_piece_reference(p) for p in pieces]


def test_batch_falls_back_to_bytes_for_merges_that_are_not_tokens():
    # "ab x" makes a symbol that is no token, emitted as its bytes; "c" has no token: dropped.
    tokens = [t for t in _byte_tokens() if t != b"c"] + [b"ab"]
    bpe = BytePairModel(tokens, [b"a b", b"ab x"])
    pieces = [b"abx", b"abxc", b"cab", b"xab", b"abxab", b"cc", b"c", b"a"] * 20
    assert bpe.encode_pieces(pieces) == [bpe.encode_piece_reference(p) for p in pieces]
    assert bpe.encode_pieces(pieces)[1] == [tokens.index(b"a"), tokens.index(b"b"), tokens.index(b"x")]
    bare = BytePairModel(tokens, [])  # no merges at all: every piece stays bytes
    assert bare.encode_pieces(pieces) == [bare.encode_piece_reference(p) for p in pieces]
    bare._arrays = None  # as for a vocabulary too large to pack: piece by piece
    assert bare.encode_pieces(pieces) == [bare.encode_piece_reference(p) for p in pieces]


@settings(max_examples=60, deadline=None)
@given(batch=st.lists(texts, min_size=64, max_size=120))
def test_batched_bpe_equals_reference_on_generated_pieces(qwen3, smollm2, batch):
    for tok in (qwen3, smollm2):
        pieces = [t.encode("utf-8", "surrogatepass") for t in batch]
        assert tok.model.bpe.encode_pieces(pieces) == [tok.model.bpe.encode_piece_reference(p) for p in pieces]


@settings(max_examples=150, deadline=None)
@given(text=texts)
def test_fast_bpe_equals_reference_on_generated_pieces(qwen3, text):
    bpe = qwen3.model.bpe
    assert bpe.merge_symbols_fast(_symbols(bpe, text)) == bpe.merge_symbols(_symbols(bpe, text))
    assert bpe._merge_long(_symbols(bpe, text)) == bpe.merge_symbols(_symbols(bpe, text))


@pytest.mark.parametrize(
    "text",
    ["a" * 3000, " " * 3000, "\u4e2d\u6587\u5b57" * 700, "\U0001f600" * 600, "ab" * 1500, "aab" * 999],
    ids=["letter", "spaces", "cjk", "emoji", "ab", "aab"],
)
def test_long_pieces_merge_like_the_heap(qwen3, text):
    bpe = qwen3.model.bpe
    assert bpe.merge_symbols_fast(_symbols(bpe, text)) == bpe.merge_symbols(_symbols(bpe, text))


def test_long_pieces_of_random_text_merge_like_the_heap(tok):
    rng = random.Random(4)
    alphabet = [a for a in ATOMS if "<" not in a]
    for _ in range(20):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(20, 400)))
        bpe = tok.model.bpe
        assert bpe._merge_long(_symbols(bpe, text)) == bpe.merge_symbols(_symbols(bpe, text))


def test_a_merge_creating_a_lower_ranked_pair_is_left_to_the_heap():
    # "c d" -> "cd", then "b cd" is ranked *below* "c d": the rank-by-rank pass must not apply
    # the remaining "c d" merges first (llama.cpp's queue would take "b cd" at once).
    tokens = _byte_tokens() + [b"cd", b"bcd"]
    bpe = BytePairModel(tokens, [b"b cd", b"c d"])
    symbols = _symbols(bpe, "bcdcdbcd" * 10)
    assert bpe._merge_long(list(symbols)) == bpe.merge_symbols(list(symbols))
    assert bpe.merge_symbols(list(symbols)).count(bpe.token_to_id[b"bcd"]) == 20


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


@pytest.mark.parametrize("name", ["qwen3", "smollm2"])
def test_a_large_first_text_batches_its_new_chunks_exactly(name, qwen3, smollm2):
    # Thousands of new chunks at once go through the batched BPE (ByteLevelModel._fill_chunks).
    tok = {"qwen3": qwen3, "smollm2": smollm2}[name]
    text = "\n".join(c["text"] for c in load_cases(name) if not c["special"])
    assert len(bpetok.models.gpt2.model._SAFE_SPACE.split(text)) > 4 * bpetok.models.gpt2.model._BATCH_FILL_PARTS
    fresh = bpetok.Tokenizer(tok.vocabulary, tok.spec)
    assert fresh.encode(text, parse_special=False) == tok.encode_reference(text, parse_special=False)
    assert fresh.encode(text) == tok.encode_reference(text)


def test_a_full_chunk_cache_still_encodes_exactly(qwen3):
    # Past its budget the chunk cache stops growing: new chunks then miss on every pass, in runs
    # (ByteLevelModel._encode_chunked's one-at-a-time path), among cached ones.
    text = "\n".join(c["text"] for c in load_cases("qwen3") if not c["special"])
    fresh = bpetok.Tokenizer(qwen3.vocabulary, qwen3.spec, cache_bytes=120_000)
    expected = qwen3.encode_reference(text, parse_special=False)
    assert fresh.encode(text, parse_special=False) == expected
    chunks = fresh.cache_info()["chunks"]
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
