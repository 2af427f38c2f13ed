"""The kernel's compiled splitters (bpetok/pretok/_split.c) against their readable twins, the
pure-Python regexes of bpetok/pretok/qwen2.py and llama3.py.

tests/test_exact.py, test_llama3.py and test_pretok_families.py hold the tokenizer (which runs
the compiled splitter when the kernel is built and the spec declares ``kernel_split``) to
llama.cpp's ids; these hold each splitter equal to its twin piece for piece, and the kernel's
whole-text path (``Kernel.encode_text``) equal to the reference encoder. The kernel module is
imported directly, so these run under BPETOK_PURE_PYTHON=1 too.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpetok.models.gpt2 import _kernel  # the suite requires the kernel to be built (CI builds it)
from bpetok.plugins import get_registry
from bpetok.pretok import llama3, qwen2, smollm
from bpetok.pretok.unicode_data import RANGE_STARTS, WHITESPACE
from helpers import load_cases

TWINS = {"qwen2": qwen2.make_pretokenizer(), "llama3": llama3.make_pretokenizer(), "smollm": smollm.make_pretokenizer()}


@pytest.fixture(scope="module", params=sorted(TWINS))
def splitter(request):
    return request.param, TWINS[request.param].split


def test_the_build_has_every_twin():
    assert set(_kernel.SPLITTERS) == set(TWINS)


@pytest.mark.parametrize("cases", ["qwen3", "smollm2", "llama-bpe", "qwen35"])
def test_every_reference_text(splitter, cases):
    name, twin = splitter
    texts = [case["text"] for case in load_cases(cases)]
    assert len(texts) > 200
    for text in texts:
        assert _kernel.split(name, text) == twin(text), text


# Codepoints of every class llama.cpp knows: the first of each of its ranges, its whitespace, and
# the ASCII the patterns name (quotes, contraction letters in both cases, \r \n, digits).
_CLASS_SAMPLES = sorted({c for c in RANGE_STARTS if not 0xD800 <= c <= 0xDFFF} | WHITESPACE)
_ASCII = list(" \t\n\r\x0b\x0c'sStTrReEvVmMlLdDxX0123456789.,!?-_()")
_ALPHABET = st.one_of(
    st.sampled_from(_ASCII),
    st.sampled_from(_CLASS_SAMPLES).map(chr),
    st.characters(),  # any codepoint, lone surrogates included
    st.sampled_from(["\u1680", "\u3000", "\x85", "\xa0", "\x1c", "\u0301", "\u0663", "\U0001f600", "\ud800", "\udfff"]),
)


@settings(max_examples=1500, deadline=None)
@given(text=st.text(_ALPHABET, max_size=60))
def test_any_text(splitter, text):
    name, twin = splitter
    assert _kernel.split(name, text) == twin(text)


def _random_texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    parts = [" " * 5, "\n", "\r\n", "\t ", "'S", "'ll", "'Re", "'vE", "'d", "'m", "'t", "1234567", "٣٤٥", "x", "Éé",
             "中文", ".,;", "\u3000", "\u2028", "\ud800", "😀", " !", "\x1c", "\u0301"]
    return ["".join(rng.choice(parts) for _ in range(rng.randint(0, 40))) for _ in range(count)]


def test_mixed_runs(splitter):
    name, twin = splitter
    for text in _random_texts(0, 3000):
        assert _kernel.split(name, text) == twin(text), text


@pytest.mark.parametrize(
    "text",
    [
        " " * 100_000,
        " " * 50_000 + "x",
        "\n" * 1000 + " " * 1000 + "a",
        " \t \u3000" * 10_000,
        "7" * 100_000,
        "'s'S'll'LL're'RE" * 1000,
        "a" * 100_000,
        "!?" * 50_000 + "\r\n" * 100,
    ],
    ids=["spaces", "spaces-x", "newlines", "unicode-spaces", "digits", "contractions", "letters", "punctuation"],
)
def test_long_runs(splitter, text):
    name, twin = splitter
    assert _kernel.split(name, text) == twin(text)


def test_every_spec_that_declares_a_splitter_has_it():
    declared = list({id(row.spec): row.spec for row in get_registry().rows() if row.spec.kernel_split}.values())
    assert {spec.kernel_split for spec in declared} == set(_kernel.SPLITTERS)
    texts = _random_texts(1, 300) + [case["text"] for case in load_cases("qwen3")[:500]]
    for spec in declared:
        pretokenizer = spec.factory()
        for text in texts:
            assert _kernel.split(spec.kernel_split, text) == pretokenizer.split(text), (spec.llama_type, text)


# -- the kernel's whole-text path ----------------------------------------------------------------


def test_the_tokenizer_uses_the_compiled_splitter(qwen3, smollm2):
    if qwen3.engine == "C kernel":
        assert qwen3.model._kernel.split == "qwen2" and qwen3.model._text_kernel is qwen3.model._kernel
        assert smollm2.model._kernel.split == "smollm" and smollm2.model._text_kernel is smollm2.model._kernel
    else:
        assert qwen3.model._text_kernel is None and smollm2.model._text_kernel is None


def _reference(tok, text: str) -> list[int]:
    """The readable path: the Python twin's pieces, each merged by the reference BPE."""
    pieces = tok.model.pretokenizer.split(text)
    return [i for piece in pieces for i in tok.model.bpe.encode_piece_reference(piece.encode("utf-8", "surrogatepass"))]


def _kernel_with_split(tok, name, cache_bytes=1 << 20, chunk_bytes=1 << 20):
    bpe = tok.model.bpe
    from bpetok.models.gpt2 import BYTE_TO_CHAR

    return _kernel.Kernel(
        bpe.byte_ids, bpe.ranks, bpe.stride, bpe.shift, bpe.n_tokens,
        [bpe._emit([bpe.n_tokens + k]) for k in range(len(bpe.virtual_texts))],
        bpe.token_to_id if bpe.ignore_merges else None,
        [c.encode() for c in BYTE_TO_CHAR], cache_bytes, 12345, chunk_bytes, name,
    )


@pytest.mark.parametrize("budget", [0, 1 << 20], ids=["no-cache", "cache"])
def test_encode_text_equals_the_reference(qwen3, budget):
    kernel = _kernel_with_split(qwen3, "qwen2", budget, budget)
    texts = [case["text"] for case in load_cases("qwen3")][:2000] + _random_texts(2, 500)
    for text in texts + texts:  # the second time from the caches
        assert kernel.encode_text(text) == _reference(qwen3, text), text


def test_encode_text_over_many_chunks(qwen3):
    # More chunks than one batch (4096), repeated ones within a batch, a head and a last part
    # ending in whitespace.
    rng = random.Random(3)
    words = ["the", "cat,", "x\n", "'s", "123", "中文", "\u3000y", "😀", "a  b", "\ud800"]
    text = "  " + " ".join(rng.choice(words) for _ in range(20_000)) + " \n "
    kernel = _kernel_with_split(qwen3, "qwen2")
    expected = _reference(qwen3, text)
    assert kernel.encode_text(text) == expected
    assert kernel.encode_text(text) == expected


@pytest.mark.parametrize("budget", [0, 1 << 20], ids=["no-cache", "cache"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_encode_texts_equals_the_reference(qwen3, budget, threads):
    """encode_texts (one call for many texts, the GIL released once, on the kernel's own threads)
    against the reference, text by text: empty texts, lone surrogates, texts past the GIL
    threshold, the same text twice, and enough text (a million code points) for several parts."""
    kernel = _kernel_with_split(qwen3, "qwen2", budget, budget)
    texts = [case["text"] for case in load_cases("qwen3")][:1500] + _random_texts(4, 200)
    texts += ["", "lone \ud800 surrogate", " ".join(texts[:300]), ""]
    expected = [_reference(qwen3, text) for text in texts]
    texts, expected = texts * 24, expected * 24
    assert sum(map(len, texts)) > 1_000_000
    assert kernel.encode_texts(texts, threads=threads) == (expected, [])
    assert kernel.encode_texts(tuple(texts[::-1]), None, threads) == (expected[::-1], [])  # from the caches; any sequence
    assert kernel.encode_texts([], threads=threads) == ([], [])
    assert kernel.encode_texts(["a"], threads=threads) == ([_reference(qwen3, "a")], [])  # below the GIL threshold


def test_encode_texts_takes_threads_from_one(qwen3):
    kernel = _kernel_with_split(qwen3, "qwen2")
    with pytest.raises(ValueError, match="threads must be at least 1, not 0"):
        kernel.encode_texts(["text"], threads=0)
    with pytest.raises(ValueError, match="threads must be at least 1"):
        kernel.encode_texts_flat(["text"], None, -3)
    assert kernel.encode_texts(["text"] * 3, threads=1 << 30)[0] == [_reference(qwen3, "text")] * 3  # at most 256 used


# One text per CPython storage kind the kernel reads without the GIL: ASCII, Latin-1 (one byte a
# code point), UCS-2 and UCS-4, lone surrogates among them, short and past the GIL threshold.
_STORAGE_KINDS = {
    "ascii": "plain text, 123 and more",
    "latin-1": "café déjà vu \xff\xa0\x80 naïve",
    "ucs-2": "中文 字符 \u3000y Ωμέγα \ud800 \udfff\ud800",
    "ucs-4": "emoji 😀👍🏽 \U0010ffff \udc00😀 中",
}


@pytest.mark.parametrize("kind", sorted(_STORAGE_KINDS))
@pytest.mark.parametrize("repeat", [1, 400], ids=["short", "long"])
def test_every_str_storage_kind_reads_as_its_utf8(qwen3, kind, repeat):
    text = _STORAGE_KINDS[kind] * repeat
    kernel = _kernel_with_split(qwen3, "qwen2")
    assert "".join(_kernel.split("qwen2", text)) == text  # each piece's UTF-8 decodes back to the text
    expected = _reference(qwen3, text)
    assert kernel.encode_text(text) == expected
    assert kernel.encode_texts([text, "x", text])[0] == [expected, _reference(qwen3, "x"), expected]


def test_encode_texts_flat_is_encode_texts_as_machine_words(qwen3):
    import numpy as np

    kernel = _kernel_with_split(qwen3, "qwen2")
    texts = [case["text"] for case in load_cases("qwen3")][:1500] + ["", "lone \ud800 surrogate", ""]
    ids, lengths, held = kernel.encode_texts_flat(texts, threads=2)
    assert held == []
    ids, lengths = np.frombuffer(ids, np.uint32), np.frombuffer(lengths, np.uint64)
    assert len(lengths) == len(texts)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    assert [ids[a:b].tolist() for a, b in zip(starts, ends)] == kernel.encode_texts(texts)[0]
    assert kernel.encode_texts_flat([]) == (bytearray(), bytearray(), [])
    with pytest.raises(TypeError, match="text must be a str, not bytes"):
        kernel.encode_texts_flat(["fine", b"bytes"])
    with pytest.raises(ValueError, match="encode_texts_flat needs a kernel built with split"):
        _kernel_with_split(qwen3, None).encode_texts_flat(["text"])


_SPECIAL_SETS = {
    "one first byte (memchr)": ("<|im_end|>", "<think>", "</think>"),
    "several first bytes": ("<think>", "[INST]", "é", "\ud800", "😀x"),
    "an empty one": ("",),
}


@pytest.mark.parametrize("specials", sorted(_SPECIAL_SETS))
def test_encode_texts_leaves_out_exactly_the_texts_that_hold_a_special(qwen3, specials):
    """encode_texts(texts, specials) against its readable twin, ``any(s in t ...)``: the indices of
    the texts that contain one of them (at its start, its end, past the GIL threshold, in any str
    storage kind), None in their place and the same ids as without specials for the others, on
    one thread or several; a special cut across two texts is in neither."""
    import numpy as np

    specials = _SPECIAL_SETS[specials]
    kernel = _kernel_with_split(qwen3, "qwen2")
    rng = random.Random(7)
    pool = list(_STORAGE_KINDS.values()) + ["<|im_end", "|>", "<thin", "k>", "[INST", "x<", ""]
    for round_ in range(300):
        n_texts = rng.randint(0, 5) if round_ % 50 else 2000  # now and then several parts
        texts = [rng.choice(pool) * rng.choice([1, 1, 300]) for _ in range(n_texts)]
        for _ in range(rng.randint(0, 3) if texts else 0):
            i = rng.randrange(len(texts))
            cut = rng.randint(0, len(texts[i]))
            texts[i] = texts[i][:cut] + rng.choice(specials + ("<|im_en", "[INS")) + texts[i][cut:]
        held = [i for i, t in enumerate(texts) if any(s in t for s in specials)]
        plain, none_held = kernel.encode_texts(texts)
        assert none_held == []
        threads = rng.choice([1, 2, 3])
        lists, got = kernel.encode_texts(texts, specials, threads)
        assert got == held
        assert lists == [None if i in held else ids for i, ids in enumerate(plain)]
        flat, counts, got = kernel.encode_texts_flat(texts, specials=list(specials), threads=threads)
        assert got == held
        counts = np.frombuffer(counts, np.uint64)
        assert counts.tolist() == [0 if i in held else len(ids) for i, ids in enumerate(plain)]
        assert np.frombuffer(flat, np.uint32).tolist() == [x for i, ids in enumerate(plain) if i not in held for x in ids]
        assert kernel.encode_texts(texts, None) == kernel.encode_texts(texts, ()) == (plain, [])


def test_encode_texts_refuses_specials_that_are_not_str(qwen3):
    kernel = _kernel_with_split(qwen3, "qwen2")
    with pytest.raises(TypeError, match="encode_texts: specials must be str, not bytes"):
        kernel.encode_texts(["text"], [b"<think>"])
    with pytest.raises(TypeError):
        kernel.encode_texts_flat(["text"], 3)


def test_encode_texts_refuses_what_encode_text_refuses(qwen3):
    kernel = _kernel_with_split(qwen3, "qwen2")
    with pytest.raises(TypeError, match="text must be a str, not bytes"):
        kernel.encode_texts(["fine", b"bytes"])
    with pytest.raises(TypeError):
        kernel.encode_texts(3)
    with pytest.raises(ValueError, match="needs a kernel built with split"):
        _kernel_with_split(qwen3, None).encode_texts(["text"])


@settings(max_examples=300, deadline=None)
@given(text=st.text(_ALPHABET, max_size=80))
def test_encode_text_any_text(qwen3, text):
    kernel = _KERNELS.setdefault("qwen3", _kernel_with_split(qwen3, "qwen2"))
    assert kernel.encode_text(text) == _reference(qwen3, text)


_KERNELS: dict = {}


def test_unknown_splitters_are_refused(qwen3):
    with pytest.raises(ValueError, match="no compiled splitter named 'nope'"):
        _kernel.split("nope", "text")
    with pytest.raises(ValueError, match="no compiled splitter named 'nope'"):
        _kernel_with_split(qwen3, "nope")
    with pytest.raises(ValueError, match="needs a kernel built with split"):
        _kernel_with_split(qwen3, None).encode_text("text")
    with pytest.raises(TypeError):
        _kernel_with_split(qwen3, "qwen2").encode_text(b"bytes")
    with pytest.raises(TypeError):
        _kernel.split("qwen2", b"bytes")
