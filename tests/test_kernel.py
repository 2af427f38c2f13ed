"""The C kernel (bpetok/models/_kernel.c) against the readable Python BPE (bpetok/models/gpt2.py).

tests/test_exact.py holds the tokenizer (whichever engine runs) to llama.cpp; these tests hold
the kernel to the reference on every piece of the reference cases, on generated text and bytes,
on long and hostile input, and across threads. The kernel module is imported directly, so these
run under BPETOK_PURE_PYTHON=1 too (that variable only picks the engine a Tokenizer uses).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.models.gpt2 import _kernel  # the suite requires the kernel to be built (CI builds it)
from bpetok.models.gpt2 import BYTE_TO_CHAR, BytePairModel
from helpers import LLAMA_TESTS, load_cases, on_threads


def kernel_of(bpe: BytePairModel, cache_bytes: int = 1 << 20, **options):
    return _kernel.Kernel(
        bpe.byte_ids,
        bpe.ranks,
        bpe.stride,
        bpe.shift,
        bpe.n_tokens,
        [bpe._emit([bpe.n_tokens + k]) for k in range(len(bpe.virtual_texts))],
        bpe.token_to_id if bpe.ignore_merges else None,
        [c.encode() for c in BYTE_TO_CHAR],
        cache_bytes,
        12345,
        **options,
    )


@pytest.fixture(scope="module", params=["qwen3", "smollm2"])
def pair(request, qwen3, smollm2):
    tok = {"qwen3": qwen3, "smollm2": smollm2}[request.param]
    return request.param, tok, kernel_of(tok.model.bpe)


def _utf8(piece: str) -> bytes:
    return piece.encode("utf-8", "surrogatepass")


def test_every_reference_piece(pair):
    name, tok, kernel = pair
    pieces = []
    for case in load_cases(name):
        pieces += tok.model.pretokenizer.split(case["text"])
    pieces = list(dict.fromkeys(pieces))
    assert len(pieces) > 5000
    expected = [tok.model.bpe.encode_piece_reference(_utf8(p)) for p in pieces]
    assert [kernel.encode_piece(_utf8(p)) for p in pieces] == expected
    flat = [i for ids in expected for i in ids]
    assert kernel.encode(pieces) == flat  # cold: every piece new
    assert kernel.encode(pieces) == flat  # warm: every piece cached
    assert kernel.encode(pieces[::-1] + pieces) == [i for ids in expected[::-1] + expected for i in ids]


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=80))
def test_any_bytes_merge_like_the_reference(qwen3, smollm2, data):
    for tok in (qwen3, smollm2):
        assert kernel_of(tok.model.bpe, 0).encode_piece(data) == tok.model.bpe.encode_piece_reference(data)


_KERNELS: dict = {}


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=120))
def test_any_text_encodes_like_the_reference(qwen3, text):
    kernel = _KERNELS.setdefault("qwen3", kernel_of(qwen3.model.bpe))
    pieces = qwen3.model.pretokenizer.split(text)
    assert kernel.encode(pieces) == [i for p in pieces for i in qwen3.model.bpe.encode_piece_reference(_utf8(p))]


@pytest.mark.parametrize(
    "piece",
    [
        "a" * 20_000,
        "ab" * 10_000,
        "\U0001f600" * 5_000,
        "中文字符" * 3_000,
        "".join(chr(random.Random(1).randrange(0x4E00, 0x9FFF)) for _ in range(5_000)),
        " " * 10_000,
        "\ud800\udfff" * 100,  # lone surrogates: their UTF-8-style bytes
    ],
    ids=["a", "ab", "emoji", "cjk", "random-cjk", "spaces", "surrogates"],
)
def test_long_pieces(pair, piece):
    _, tok, kernel = pair
    expected = tok.model.bpe.encode_piece_reference(_utf8(piece))
    assert kernel.encode_piece(_utf8(piece)) == expected
    assert kernel.encode([piece]) == expected


def test_long_pieces_where_merges_come_out_of_rank_order():
    # This vocabulary has merges that form a pair ranked below the merge that formed it (".:." + ":"
    # ranks before the merge making ".:.", and " r" + "ahat" before "ahat"): the rank-by-rank pass
    # (merge_by_rank) gives such a piece back to the heap, which must see it unchanged.
    bpe = bpetok.from_gguf(LLAMA_TESTS / "ggml-vocab-llama-bpe.gguf.gz").model.bpe
    kernel = kernel_of(bpe)
    rng = random.Random(7)
    words = ["the", " and", "ing", "tion", " ", "  ", "a", "中文", "é", "1", "\n"]
    # (10,000 bytes and more: past RANKS_PER_SYMBOL for its 280,147 ranks)
    pieces = [".:" * 5_000, " rahat" * 1_700, "a" * 10_000, " " * 10_000, "".join(rng.choice(words) for _ in range(4_000))]
    for piece in pieces:
        assert kernel.encode_piece(_utf8(piece)) == bpe.encode_piece_reference(_utf8(piece))


def test_a_long_piece_whose_merge_forms_a_lower_ranked_pair_is_merged_by_the_heap():
    # "c d" -> "cd", then "b cd" ranks *below* "c d": the remaining "c d" merges must wait
    # (llama.cpp's queue takes "b cd" at once); 3,000 symbols, past RANK_LIMIT.
    tokens = [c.encode() for c in BYTE_TO_CHAR] + [b"cd", b"bcd"]
    bpe = BytePairModel(tokens, [b"b cd", b"c d"])
    piece = b"bcdcdbcd" * 375
    ids = kernel_of(bpe).encode_piece(piece)
    assert ids == bpe.encode_piece_reference(piece)
    assert ids.count(tokens.index(b"bcd")) == 750


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), length=st.integers(5_000, 9_000))
def test_long_pieces_of_few_letters_merge_like_the_reference(qwen3, smollm2, seed, length):
    # Many merges per rank, queued by sweeps of several earlier ranks: a bucket's positions arrive
    # out of order and must be taken left to right all the same. (5,000 bytes and more: past
    # RANKS_PER_SYMBOL for Qwen3's 151,387 ranks, so the rank-by-rank pass runs.)
    rng = random.Random(seed)
    letters = [b"a", b"b", b" ", b"e", b"th", b"in", "中".encode(), b"1", b"\n"]
    data = b"".join(rng.choice(letters) for _ in range(length))[:length]
    for tok in (qwen3, smollm2):
        assert kernel_of(tok.model.bpe, 0).encode_piece(data) == tok.model.bpe.encode_piece_reference(data)


def test_ignore_merges_takes_whole_tokens(qwen3):
    bpe = BytePairModel(qwen3.vocabulary.tokens, qwen3.vocabulary.merges, ignore_merges=True)
    kernel = kernel_of(bpe)
    pieces = [p for c in load_cases("qwen3")[:800] for p in qwen3.model.pretokenizer.split(c["text"])]
    for piece in pieces:
        assert kernel.encode_piece(_utf8(piece)) == bpe.encode_piece_reference(_utf8(piece))


def test_one_byte_pieces_cached_or_not(qwen3, smollm2):
    # A one-byte piece's ids are made when the kernel is built, not looked up in the piece cache.
    for tok in (qwen3, smollm2):
        for cache_bytes in (0, 1 << 20):
            kernel = kernel_of(tok.model.bpe, cache_bytes)
            pieces = [chr(b) for b in range(128)]
            expected = [i for p in pieces for i in tok.model.bpe.encode_piece_reference(_utf8(p))]
            assert kernel.encode(pieces) == expected
            assert kernel.encode(pieces + ["ab", "a"] + pieces) == expected + kernel.encode(["ab", "a"]) + expected


@pytest.mark.parametrize("other", ["é", "Δ", "\U0001f600", "\ud800"], ids=["ucs1", "ucs2", "ucs4", "surrogate"])
def test_mostly_ascii_text_of_each_str_kind(qwen3, other):
    # encode_text copies a str's ASCII to UTF-8 8 bytes of storage at a time: one code point that
    # is not ASCII at every offset around those words' ends, in each kind of str.
    kernel = kernel_of(qwen3.model.bpe, split="qwen2")
    for length in (0, 1, 7, 8, 9, 17, 33):
        for at in range(length + 1):
            text = ("x y_z, " * 6)[:at] + other + ("q.r s" * 8)[: length - at]
            assert kernel.encode_text(text) == qwen3.model.encode_fragment_reference(text, True), (length, at)


def test_virtual_symbols_fall_back_to_their_bytes():
    # "ab" + "c" merges to "abc", which is not a token: its bytes' one-byte tokens are emitted.
    tokens = [c.encode() for c in BYTE_TO_CHAR] + [b"ab"]
    bpe = BytePairModel(tokens, [b"a b", b"ab c", b"x y"])
    kernel = kernel_of(bpe)
    for piece in (b"abc", b"xy", b"abcabc", b"xyz", b"", b"\xff\x00"):
        assert kernel.encode_piece(piece) == bpe.encode_piece_reference(piece)


def test_hostile_calls_raise_clean_errors(qwen3):
    kernel = kernel_of(qwen3.model.bpe)
    with pytest.raises(TypeError, match="pieces must be str, not int"):
        kernel.encode(["ok", 5])
    with pytest.raises(TypeError):
        kernel.encode(None)
    with pytest.raises(TypeError):
        kernel.encode_piece("not bytes")
    assert kernel.encode([]) == []
    assert kernel.encode(["", "", "a"]) == kernel.encode(["a"])


def test_tables_out_of_range_are_refused(qwen3):
    bpe = qwen3.model.bpe
    good = dict(
        byte_ids=bpe.byte_ids, ranks={}, stride=bpe.stride, shift=bpe.shift, n_tokens=bpe.n_tokens,
        virtual_emit=[], whole=None, byte_chars=[c.encode() for c in BYTE_TO_CHAR], cache_bytes=0, seed=0,
    )
    _kernel.Kernel(**good)
    bad_cases = [
        {"byte_ids": [bpe.n_tokens] * 256},
        {"byte_ids": [0] * 255},
        {"ranks": {bpe.n_tokens * bpe.stride: 5}},  # left symbol past the last
        {"ranks": {1: (7 << bpe.shift) | bpe.n_tokens}},  # merged symbol past the last
        {"ranks": {-1: 0}},
        {"virtual_emit": [[bpe.n_tokens]]},
        {"byte_chars": [b""] * 256},
        {"cache_bytes": -1},
        {"whole": {"not bytes": 1}},
        {"whole": {b"x": bpe.n_tokens}},
    ]
    for change in bad_cases:
        with pytest.raises((ValueError, TypeError, OverflowError)):
            _kernel.Kernel(**{**good, **change})


def test_threads_agree_with_one_thread(qwen3):
    kernel = kernel_of(qwen3.model.bpe, cache_bytes=200_000)
    texts = [c["text"] * 3 for c in load_cases("qwen3")[:400]]
    pieces = [qwen3.model.pretokenizer.split(t) for t in texts]
    expected = [[i for p in ps for i in qwen3.model.bpe.encode_piece_reference(_utf8(p))] for ps in pieces]

    def work(k: int) -> list:
        order = list(range(len(pieces)))
        random.Random(k).shuffle(order)
        return [(i, kernel.encode(pieces[i])) for i in order]

    for found in on_threads(work):
        assert all(ids == expected[i] for i, ids in found)


def test_the_piece_cache_stays_within_its_budget(qwen3):
    kernel = kernel_of(qwen3.model.bpe, cache_bytes=300_000)
    rng = random.Random(5)
    for _ in range(50):
        kernel.encode(["".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(rng.randrange(1, 40))) for _ in range(500)])
    info = kernel.cache_info()["pieces"]
    assert 0 < info["bytes"] <= info["budget"] == 300_000
    assert info["entries"] > 1000


def test_a_tokenizer_uses_the_kernel_unless_told_not_to(qwen3):
    forced = os.environ.get("BPETOK_PURE_PYTHON", "").strip() not in ("", "0")
    assert qwen3.engine == ("pure Python" if forced else "C kernel")
    code = "import bpetok, sys; sys.path.insert(0, 'tests'); from helpers import QWEN3; print(bpetok.from_gguf(QWEN3).engine)"
    env = {**os.environ, "BPETOK_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "pure Python"


def test_the_cli_says_which_engine_runs(qwen3):
    env = {k: v for k, v in os.environ.items() if k != "BPETOK_PURE_PYTHON"}
    out = subprocess.run([sys.executable, "-m", "bpetok.apps.cli", "--version"], env=env, capture_output=True, text=True)
    assert out.stdout.strip().endswith("engine: C kernel")
    env["BPETOK_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-m", "bpetok.apps.cli", "--version"], env=env, capture_output=True, text=True)
    assert out.stdout.strip().endswith("engine: pure Python: BPETOK_PURE_PYTHON is set")
    from helpers import QWEN3

    out = subprocess.run([sys.executable, "-m", "bpetok.apps.cli", "info", str(QWEN3)], env=env, capture_output=True, text=True)
    assert "engine:          pure Python" in out.stdout


# -- space chunks ----------------------------------------------------------------------------------


def _reference_chunks(tok, parts):
    return [i for part in parts for p in tok.model.pretokenizer.split(" " + part) for i in tok.model.bpe.encode_piece_reference(_utf8(p))]


def _chunk_ids(kernel, tok, parts, start=1):
    """encode_chunks as ByteLevelModel._kernel_chunks calls it: the chunks the kernel lacks are
    split in Python, together, and handed back."""
    ids, lacking = kernel.encode_chunks(parts, start)
    if lacking:
        assert ids is None
        ids, lacking = kernel.encode_chunks(parts, start, lacking, tok.model.pretokenizer.split(" " + " ".join(lacking)))
    assert lacking == []
    return ids


def test_chunks_of_every_reference_text(pair):
    name, tok, _ = pair
    kernel = kernel_of(tok.model.bpe)
    kernel_with_chunks = _kernel.Kernel(*_args(tok.model.bpe), chunk_bytes=1 << 24)
    text = "\n".join(c["text"] for c in load_cases(name))
    parts = bpetok.models.gpt2.model._SAFE_SPACE.split(text)
    expected = _reference_chunks(tok, parts[1:])
    assert _chunk_ids(kernel_with_chunks, tok, parts) == expected  # cold
    assert kernel_with_chunks.encode_chunks(parts, 1) == (expected, [])  # warm: every chunk cached
    assert kernel_with_chunks.cache_info()["chunks"]["entries"] > 1000
    # No chunk budget: nothing remembered, the same ids (from the chunks given).
    assert _chunk_ids(kernel, tok, parts) == expected
    assert kernel.cache_info()["chunks"]["entries"] == 0
    assert kernel.encode_chunks(parts, 1)[0] is None


def test_the_chunks_it_lacks_are_each_named_once_in_text_order(qwen3):
    kernel = _kernel.Kernel(*_args(qwen3.model.bpe), chunk_bytes=1 << 20)
    assert kernel.encode_chunks(["Hi", "b", "a", "b", "c"], 1) == (None, ["b", "a", "c"])
    assert _chunk_ids(kernel, qwen3, ["Hi", "a"]) == _reference_chunks(qwen3, ["a"])
    assert kernel.encode_chunks(["Hi", "b", "a", "b", "c"], 1) == (None, ["b", "c"])  # "a" is cached now


def _args(bpe):
    return (
        bpe.byte_ids, bpe.ranks, bpe.stride, bpe.shift, bpe.n_tokens,
        [bpe._emit([bpe.n_tokens + k]) for k in range(len(bpe.virtual_texts))],
        bpe.token_to_id if bpe.ignore_merges else None, [c.encode() for c in BYTE_TO_CHAR], 1 << 20, 7,
    )


@pytest.mark.parametrize("last", ["", "x", "x\n\n", "x  ", "\n", "  "])
def test_a_texts_last_part_may_end_in_whitespace(qwen3, last):
    # The last part may end in whitespace; it comes last in the chunks split together.
    kernel = _kernel.Kernel(*_args(qwen3.model.bpe), chunk_bytes=1 << 20)
    parts = ["Hi", "there", "more", last]
    assert _chunk_ids(kernel, qwen3, parts) == _reference_chunks(qwen3, parts[1:])
    text = "Hi there more " + last
    assert bpetok.Tokenizer(qwen3.vocabulary, qwen3.spec).encode(text) == qwen3.encode_reference(text)


def test_pieces_that_cross_a_chunks_end_are_not_taken(qwen3):
    kernel = _kernel.Kernel(*_args(qwen3.model.bpe), chunk_bytes=1 << 20)
    parts = ["", "ab", "cd", "ab", "ef"]
    # One piece for all three chunks (a pre-tokenizer that broke the space_chunks promise): the
    # chunks are still lacking, and nothing was remembered.
    assert kernel.encode_chunks(parts, 1, ["ab", "cd", "ef"], [" ab cd ef"]) == (None, ["ab", "cd", "ef"])
    assert kernel.encode_chunks(parts, 1, ["ab", "cd", "ef"], [" ab c", "d ef"]) == (None, ["ab", "cd", "ef"])
    assert kernel.cache_info()["chunks"]["entries"] == 0
    ids, lacking = kernel.encode_chunks(parts, 1, ["ab", "cd", "ef"], [" ab", " cd", " ef"], [1, 2, 3])
    assert (ids, lacking) == (_reference_chunks(qwen3, parts[1:]), [])


def test_the_model_splits_each_chunk_alone_when_a_piece_crosses_a_chunks_end(qwen3):
    tok = bpetok.Tokenizer(qwen3.vocabulary, qwen3.spec)
    tok.model._kernel = _kernel.Kernel(*_args(qwen3.model.bpe), chunk_bytes=1 << 20)  # also under BPETOK_PURE_PYTHON=1
    calls = []

    class Whole:  # one piece for the whole text: crosses every chunk's end
        def split(self, text):
            calls.append(text)
            return [text]

    tok.model.pretokenizer = Whole()
    ids = tok.model._kernel_chunks(["", "ab", "cd", "ab", "ef"])
    assert calls == [" ab cd ef", " ab", " cd", " ef"]  # after the joined try, each chunk alone
    assert ids == [i for part in ["ab", "cd", "ab", "ef"] for i in qwen3.model.bpe.encode_piece_reference(_utf8(" " + part))]


def test_hostile_chunk_calls(qwen3):
    kernel = _kernel.Kernel(*_args(qwen3.model.bpe), chunk_bytes=1 << 20)
    with pytest.raises(ValueError, match="start"):
        kernel.encode_chunks(["a"], 2)
    with pytest.raises(ValueError, match="start"):
        kernel.encode_chunks(["a"], -1)
    with pytest.raises(TypeError):
        kernel.encode_chunks(["", "a", 3], 1)
    for pieces in ([1], None, [b" a"]):  # a piece that is not a str, no pieces
        with pytest.raises(TypeError):
            kernel.encode_chunks(["", "a"], 1, ["a"], pieces)
    with pytest.raises(TypeError):
        kernel.encode_chunks(["", "a"], 1, [b"a"], [" a"])
    with pytest.raises(TypeError):
        kernel.encode_chunks(["", "a"], 1, ["a"], [" a"], [" a"])
    for stops in ([], [0, 1], [2], [0], [-1]):  # too few or many, past the pieces, short of them
        with pytest.raises(ValueError, match="stop"):
            kernel.encode_chunks(["", "a"], 1, ["a"], [" a"], stops)
    with pytest.raises(ValueError, match="stop"):
        kernel.encode_chunks(["", "a", "b"], 1, ["a", "b"], [" a", " b"], [2, 1])  # out of order
    assert kernel.encode_chunks(["", "a", "b"], 3) == ([], [])
    assert kernel.encode_chunks(["", "a"], 1, ["a"]) == (None, ["a"])  # no pieces: they do not cover the chunk
    # None of that left anything behind: the same call works.
    assert kernel.encode_chunks(["", "a", "b"], 1) == (None, ["a", "b"])
    assert _chunk_ids(kernel, qwen3, ["", "a", "b"]) == _reference_chunks(qwen3, ["a", "b"])


def test_the_chunk_cache_stays_within_its_budget(qwen3):
    kernel = _kernel.Kernel(*_args(qwen3.model.bpe), chunk_bytes=200_000)
    rng = random.Random(9)
    for _ in range(30):
        parts = [""] + ["".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(rng.randrange(1, 30))) for _ in range(500)]
        assert _chunk_ids(kernel, qwen3, parts) == _reference_chunks(qwen3, parts[1:])
    info = kernel.cache_info()["chunks"]
    assert 0 < info["bytes"] <= info["budget"] == 200_000


# -- the merge table built in C (build_merges) against BytePairModel._build_ranks ---------------


def _ranks_of_table(bpe: BytePairModel, table: bytes) -> dict[int, int]:
    """A build_merges table in ``BytePairModel.ranks``' form (a duplicate keeps its first rank)."""
    import struct

    ranks: dict[int, int] = {}
    for rank, (left, right, merged) in enumerate(struct.iter_unpack("<III", table)):
        if (left, right, merged) != (0xFFFFFFFF,) * 3:
            ranks.setdefault(left * bpe.stride + right, rank << bpe.shift | merged)
    return ranks


def _both_builds(monkeypatch, tokens: list[bytes], merges: list[bytes]):
    """The model as the kernel engine builds it (merge table in C) and as the pure-Python one does."""
    monkeypatch.delenv("BPETOK_PURE_PYTHON", raising=False)
    compiled = BytePairModel(tokens, merges)
    monkeypatch.setenv("BPETOK_PURE_PYTHON", "1")
    reference = BytePairModel(tokens, merges)
    monkeypatch.delenv("BPETOK_PURE_PYTHON")
    return compiled, reference


def _assert_same_tables(compiled: BytePairModel, reference: BytePairModel) -> None:
    assert compiled._merge_table is not None and reference._merge_table is None
    assert compiled._ranks is None  # not built unless asked for
    assert compiled.byte_ids == reference.byte_ids
    assert compiled.virtual_texts == reference.virtual_texts
    assert _ranks_of_table(compiled, compiled._merge_table) == reference.ranks
    assert compiled.ranks == reference.ranks  # and the lazily built dict matches too


def test_merge_table_in_c_equals_the_python_build(monkeypatch, tok_pair):
    vocabulary = tok_pair.vocabulary
    compiled, reference = _both_builds(monkeypatch, vocabulary.tokens, vocabulary.merges)
    assert len(compiled._merge_table) == 12 * len(vocabulary.merges)
    _assert_same_tables(compiled, reference)


@pytest.fixture(scope="module", params=["qwen3", "smollm2"])
def tok_pair(request, qwen3, smollm2):
    return {"qwen3": qwen3, "smollm2": smollm2}[request.param]


_BYTE_TOKENS = [c.encode() for c in BYTE_TO_CHAR]


@pytest.mark.parametrize(
    "tokens, merges",
    [
        (_BYTE_TOKENS + [b"ab", b"b c"], [b"a b", b"ab c", b"a b"]),  # duplicate; "abc" is virtual
        (_BYTE_TOKENS + [b"ab", b"b c"], [b"a b", b"x", b"", b" a", b"a b c"]),  # no space, empty, leading space
        (_BYTE_TOKENS[:100] + [b"\xc4\xa0a"], [b"\xc4\xa0 a", b"\xc4\xa0a \xc4\xa0a"]),  # bytes with no token
        (_BYTE_TOKENS + [b"ab", b"ab"], [b"a b", b"ab ab"]),  # a duplicated token keeps its last id
    ],
)
def test_odd_merge_lists_build_the_same_in_c(monkeypatch, tokens, merges):
    _assert_same_tables(*_both_builds(monkeypatch, tokens, merges))


def test_a_merge_naming_a_missing_token_is_refused_by_both_builds(monkeypatch):
    for pure in ("", "1"):
        monkeypatch.setenv("BPETOK_PURE_PYTHON", pure)
        with pytest.raises(bpetok.VocabularyError, match="not in 'tokenizer.ggml.tokens'"):
            BytePairModel(_BYTE_TOKENS + [b"ab"], [b"a b", b"ab q\xc3\xa9"])
    assert _kernel.build_merges(_BYTE_TOKENS, [b"a q\xc3\xa9"], []) is None
    with pytest.raises(TypeError):
        _kernel.build_merges(_BYTE_TOKENS, ["a b"], [])
    with pytest.raises(ValueError):
        _kernel.build_merges(_BYTE_TOKENS, [], [b"a"])  # a "virtual" text that is a token


@settings(max_examples=200, deadline=None)
@given(
    extra=st.lists(st.binary(min_size=0, max_size=4), max_size=12),
    picks=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 300), st.sampled_from([b" ", b"  ", b""])), max_size=30),
    drop=st.integers(0, 256),
)
def test_random_merge_lists_build_the_same_in_c(extra, picks, drop):
    tokens = list(dict.fromkeys(_BYTE_TOKENS[drop:] + [e for e in extra if e]))
    merges = [tokens[a % len(tokens)] + sep + tokens[b % len(tokens)] for a, b, sep in picks] if tokens else []
    with pytest.MonkeyPatch.context() as monkeypatch:
        try:
            compiled, reference = _both_builds(monkeypatch, tokens, merges)
        except bpetok.VocabularyError:
            monkeypatch.setenv("BPETOK_PURE_PYTHON", "1")
            with pytest.raises(bpetok.VocabularyError):
                BytePairModel(tokens, merges)
            return
        _assert_same_tables(compiled, reference)
        for piece in (b"abc", b"hello world", bytes(range(0, 256, 7))):
            assert kernel_of(compiled).encode_piece(piece) == reference.encode_piece_reference(piece)
