"""llama.cpp's collapsed text: the long-text (numpy) path agrees with the per-character table."""

from __future__ import annotations

from bpetok.pretok import _CLASS_TABLE, _collapse_array, collapse


def test_every_codepoint_collapses_alike_on_both_paths():
    # Every codepoint, surrogates included: the numpy table (long texts) against the
    # class lookup that short texts use, built from the same generated ranges.
    text = "".join(map(chr, range(0x110000)))
    assert _collapse_array(text) == text.translate(_CLASS_TABLE)


def test_collapse_keeps_ascii_and_gives_one_placeholder_per_codepoint():
    short = "naïve café, 東京 ٣\u3000x\ud800"
    long = short * 1000  # above the numpy threshold
    assert collapse(long) == collapse(short) * 1000
    assert len(collapse(short)) == len(short)
    assert [c for c, k in zip(short, collapse(short)) if c.isascii() and c != k] == []
    assert all(not k.isascii() for c, k in zip(short, collapse(short)) if not c.isascii())
