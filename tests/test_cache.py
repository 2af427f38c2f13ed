"""The tokenizer's caches are bounded by bytes and hold ids compactly (issue 11, fault 4).

New text keeps bringing new keys (random CJK never repeats a chunk), so before the byte budget a
tokenizer grew by ~37 bytes per character encoded, without a plateau.
"""

from __future__ import annotations

import gc
import random
import tracemalloc
from array import array

import pytest

import bpetok
from bpetok.cache import DEFAULT_CACHE_BYTES, IdCache, cache_budget
from bpetok.pretok import collapse


def random_cjk(seed: int, chars: int) -> list[str]:
    """Texts of random CJK ideographs, with a space or a full stop now and then (so there are
    space chunks and heads as well as long pieces)."""
    rng = random.Random(seed)
    texts = []
    for _ in range(chars // 2000):
        out = []
        for _ in range(2000):
            r = rng.random()
            out.append(" " if r < 0.08 else "\u3002" if r < 0.1 else chr(rng.randrange(0x4E00, 0x9FFF)))
        texts.append("".join(out))
    return texts


def _traced_growth(tok: bpetok.Tokenizer, texts: list[str]) -> int:
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for text in texts:
        tok.encode(text)
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - before


def _warm_class_table() -> None:
    # The pre-tokenizer's codepoint -> class table fills as characters are met; it is bounded by
    # Unicode, not by the text, so it is filled before measuring (short texts use it).
    for start in range(0x4E00, 0x9FFF, 1000):
        collapse("".join(map(chr, range(start, min(start + 1000, 0x9FFF)))))


def test_new_cjk_text_stops_growing_a_tokenizer_at_its_budget(qwen3):
    budget = 500_000
    tok = bpetok.Tokenizer(qwen3.vocabulary, qwen3.spec, cache_bytes=budget)
    tok.encode("warm up 中文")  # lazily built tables are not the caches
    _warm_class_table()
    tracemalloc.start()
    try:
        first = _traced_growth(tok, random_cjk(1, 100_000))
        second = _traced_growth(tok, random_cjk(2, 100_000))
    finally:
        tracemalloc.stop()
    # Without a budget 100k characters of new CJK kept ~3.5 MB; now the caches stop at 0.5 MB...
    assert first < budget * 1.2
    # ... and more new text adds nothing once they are full.
    assert second < budget * 0.05
    info = tok.cache_info()
    assert all(row["bytes"] <= row["budget"] for row in info.values())
    assert sum(row["budget"] for row in info.values()) <= budget
    if not tok.model.compiled:  # the pure engine caches pieces only
        assert info["pieces"]["entries"] > 0 and info["pieces"]["budget"] == budget
        return
    assert info["chunks"]["entries"] > 0
    if tok.model._text_kernel is None:  # the kernel's whole-text path caches a text's head as pieces
        assert info["heads"]["entries"] > 0


def test_the_accounting_is_what_the_entries_hold(qwen3):
    tok = bpetok.Tokenizer(qwen3.vocabulary, qwen3.spec, cache_bytes=4_000_000)
    _warm_class_table()
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for text in random_cjk(3, 60_000):
            tok.encode(text)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    counted = sum(row["bytes"] for row in tok.cache_info().values())
    assert counted > 100_000
    # The dicts' tables grow in steps: what tracemalloc sees is within a third of the count.
    assert 0.66 * counted < grown < 1.33 * counted


def test_ids_are_stored_as_arrays(qwen3):
    tok = bpetok.Tokenizer(qwen3.vocabulary, qwen3.spec)
    text = "The quick brown fox 中文 jumps over the lazy dog. " * 3
    assert tok.encode(text) == qwen3.encode_reference(text)
    assert tok.encode(text) == qwen3.encode_reference(text)
    # With the C kernel, pieces and chunks live in its caches (uint32 ids); heads stay in Python,
    # unless the kernel splits whole texts (then a head's pieces go to its piece cache). The
    # pure-Python engine caches pieces only.
    caches = (tok.model._cache,) if tok.engine == "pure Python" else (tok.model._heads,)
    for cache in caches:
        if cache.budget:
            assert cache and all(type(ids) is array and ids.itemsize == 4 for ids in cache.values())
    assert all(row["entries"] > 0 for row in tok.cache_info().values() if row["budget"])
    assert tok.model._heads.budget or tok.model._text_kernel is not None or tok.engine == "pure Python"


def test_a_zero_budget_caches_nothing_and_stays_exact(qwen3):
    tok = bpetok.Tokenizer(qwen3.vocabulary, qwen3.spec, cache_bytes=0)
    text = "".join(random_cjk(4, 4000)) + " hello world, hello again"
    assert tok.encode(text) == qwen3.encode_reference(text)
    assert tok.encode(text) == qwen3.encode_reference(text)
    assert all(row["entries"] == 0 for row in tok.cache_info().values())


def test_the_budget_comes_from_the_argument_the_environment_or_the_default(monkeypatch):
    monkeypatch.delenv("BPETOK_CACHE_BYTES", raising=False)
    assert cache_budget(None) == DEFAULT_CACHE_BYTES
    assert cache_budget(1234) == 1234
    monkeypatch.setenv("BPETOK_CACHE_BYTES", "5000")
    assert cache_budget(None) == 5000
    assert cache_budget(7) == 7
    monkeypatch.setenv("BPETOK_CACHE_BYTES", "lots")
    with pytest.raises(ValueError, match="BPETOK_CACHE_BYTES='lots'"):
        cache_budget(None)


@pytest.mark.parametrize("bad, error", [(-1, ValueError), ("10", TypeError), (1.5, TypeError), (True, TypeError)])
def test_a_bad_budget_is_refused(qwen3, bad, error):
    with pytest.raises(error, match="cache_bytes"):
        bpetok.Tokenizer(qwen3.vocabulary, qwen3.spec, cache_bytes=bad)


def test_an_entry_that_does_not_fit_is_skipped_not_stored():
    cache = IdCache(budget=IdCache.entry_bytes("ab", array("I", [1, 2])) + 10)
    assert not cache.put("x" * 1000, array("I", [1]))
    assert cache.put("ab", array("I", [1, 2]))
    assert cache.full and not cache.put("c", array("I", [3]))
    assert dict(cache) == {"ab": array("I", [1, 2])}
