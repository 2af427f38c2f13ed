"""Write bpetok_hf/bert_data.py: what Hugging Face tokenizers' ``BertNormalizer`` and
``BertPreTokenizer`` do to each codepoint, asked of tokenizers itself.

    python plugins/bpetok-hf/scripts/bert_tables.py

HF's BERT components classify characters with Rust crates' own Unicode tables (older than
Python's ``unicodedata`` in places, newer in others), so bpetok-hf takes the classes from HF:
each step of the normalizer alone (clean_text, handle_chinese_chars, strip_accents, lowercase)
on every codepoint, and whether ``BertPreTokenizer`` splits ``a<c>a`` at ``c`` (whitespace:
removed) or around it (punctuation: isolated). Each step works one character at a time, so the
steps compose per character as HF runs them.
"""

from __future__ import annotations

import pathlib

import tokenizers
from tokenizers import normalizers, pre_tokenizers

OUT = pathlib.Path(__file__).resolve().parents[1] / "bpetok_hf" / "bert_data.py"
CODEPOINTS = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]


def step(**flags) -> dict[int, str]:
    """cp -> what one step alone makes of it, for the codepoints it changes."""
    options = {"clean_text": False, "handle_chinese_chars": False, "strip_accents": False, "lowercase": False, **flags}
    normalizer = normalizers.BertNormalizer(**options)
    out = {}
    for cp in CODEPOINTS:
        c = chr(cp)
        got = normalizer.normalize_str(c)
        if got != c:
            out[cp] = got
    return out


def runs(cps) -> list[tuple[int, int]]:
    """Sorted codepoints as (first, last) runs."""
    out: list[list[int]] = []
    for cp in sorted(cps):
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return [(a, b) for a, b in out]


def main() -> None:
    clean = step(clean_text=True)
    removed = [cp for cp, s in clean.items() if s == ""]
    spaced = [cp for cp, s in clean.items() if s == " "]
    assert len(removed) + len(spaced) == len(clean), "clean_text only removes or makes spaces"
    chinese = step(handle_chinese_chars=True)
    assert all(s == f" {chr(cp)} " for cp, s in chinese.items())
    strip = step(strip_accents=True)
    lower = step(lowercase=True)
    splitter = pre_tokenizers.BertPreTokenizer()
    whitespace, punctuation = [], []
    for cp in CODEPOINTS:
        pieces = splitter.pre_tokenize_str(f"a{chr(cp)}a")
        if len(pieces) == 2:
            whitespace.append(cp)
        elif len(pieces) == 3:
            punctuation.append(cp)
    lines = [
        f'"""Hugging Face tokenizers\' BERT character classes (tokenizers {tokenizers.__version__}), asked of',
        "tokenizers by scripts/bert_tables.py; do not edit by hand.",
        "",
        "Runs are (first, last) codepoints; maps give what a step makes of each codepoint it changes.",
        '"""',
        "",
        "# clean_text: removed (controls, NUL, U+FFFD...) and made a space (whitespace).",
        f"CLEAN_REMOVED = {runs(removed)!r}",
        f"CLEAN_SPACE = {runs(spaced)!r}",
        "# handle_chinese_chars: each becomes ' c '.",
        f"CHINESE = {runs(chinese)!r}",
        "# strip_accents: NFD, then nonspacing marks removed.",
        f"STRIP_ACCENTS = {strip!r}",
        "# lowercase: Rust's char::to_lowercase.",
        f"LOWERCASE = {lower!r}",
        "# BertPreTokenizer: split at (removed) and around (isolated).",
        f"WHITESPACE = {runs(whitespace)!r}",
        f"PUNCTUATION = {runs(punctuation)!r}",
        "",
    ]
    OUT.write_text("\n".join(lines), encoding="utf-8")
    print(OUT, f"{len(removed)} removed, {len(spaced)} spaces, {len(chinese)} CJK, {len(strip)} stripped, "
          f"{len(lower)} lowercased, {len(whitespace)} whitespace, {len(punctuation)} punctuation")


if __name__ == "__main__":
    main()
