"""The tokenizer.json of a ``bert`` (WordPiece) vocabulary: llama.cpp's WPM session in HF's components.

llama.cpp (bpetok.models.wpm) treats each codepoint on its own: dropped (controls, and marks with
``strip_accents``), a word boundary (whitespace), a word of its own (punctuation, ASCII symbols,
CJK) or part of a word, in each case as the first codepoint of its decomposition, lowercased.
HF's BertNormalizer decomposes otherwise (a Hangul syllable keeps its jamo, llama.cpp keeps the
first) and classes characters by other tables, so the export spells llama.cpp's classes out,
codepoint by codepoint, from bpetok's copy of llama.cpp's tables:

- normalizer: ``Replace`` of the dropped codepoints by nothing and of whitespace by a space (both
  regex classes of explicit codepoints, so Oniguruma's Unicode version does not matter), a
  ``Replace`` putting U+0001 after each codepoint the map changes, then a ``Precompiled`` map of
  each remaining codepoint llama.cpp changes, and of U+0001 to nothing (built by
  :mod:`bpetok_hf.charsmap_builder`): HF's ``Precompiled`` replaces a grapheme cluster under 6
  bytes that starts with a key whole (an uppercase letter followed by an emoji modifier would lose
  the modifier), and the U+0001, a control, ends the cluster after the key;
- pre-tokenizer: ``WhitespaceSplit``, then a ``Split`` isolating each character that is a word
  of its own;
- model: ``WordPiece`` over the vocabulary as HF writes it (``▁x`` is ``x``, ``x`` is ``##x``,
  ``[...]`` kept, as llama.cpp's converter read it), no word-length limit (llama.cpp has none).

What HF cannot say: llama.cpp matches a word-initial token inside a word after a ``▁`` in the
text, HF's WordPiece only ``##`` pieces there.
"""

from __future__ import annotations

from bpetok import TokenAttr, Tokenizer

__all__ = ["wpm_refusal", "wpm_texts", "wpm_normalizer_and_pre", "wpm_model", "wpm_template", "WPM_DECODER"]

SPACE = "\u2581"
WPM_DECODER = {"type": "WordPiece", "prefix": "##", "cleanup": False}
# llama.cpp's WordPiece has no word-length limit; HF's default is 100 characters.
_NO_LIMIT = 1 << 30


def wpm_texts(tok: Tokenizer) -> list[str]:
    """Each token's text as HF's WordPiece vocabulary holds it."""
    out = []
    for data in tok.vocabulary.tokens:
        text = data.decode("utf-8")
        if text.startswith(SPACE):
            out.append(text[1:])
        elif text.startswith("[") and text.endswith("]"):
            out.append(text)
        else:
            out.append("##" + text)
    return out


def wpm_refusal(tok: Tokenizer, texts: list[str]) -> str | None:
    """Why this bert vocabulary cannot be a WordPiece tokenizer.json with llama.cpp's ids, or None."""
    vocab = tok.vocabulary
    seen: dict[str, int] = {}
    for token_id, text in enumerate(texts):
        if text in ("", "##"):
            return f"token {token_id} is {vocab.tokens[token_id]!r}, an empty piece HF's WordPiece cannot hold"
        if text in seen:
            return f"tokens {seen[text]} and {token_id} are both {text!r} in HF's spelling (##x for a continuation)"
        seen[text] = token_id
        cut = vocab.attrs[token_id] & (TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN)
        if cut and text != vocab.tokens[token_id].decode("utf-8"):
            return (f"special token {token_id} {vocab.tokens[token_id].decode('utf-8')!r} is {text!r} in HF's "
                    "spelling, and an added token must be its vocabulary entry")
    for role in ("bos", "sep", "unk"):
        if vocab.special_ids.get(role) is None:
            return f"it has no {role} token, which llama.cpp's [CLS] ... [SEP] and [UNK] need"
    return None


def _flags(tok: Tokenizer) -> tuple[bool, bool]:
    flags = tok.vocabulary.flags
    lowercase = bool(flags.get("normalizer_lowercase", True))
    return lowercase, bool(flags.get("normalizer_strip_accents", lowercase))


def _classes(tok: Tokenizer):
    """llama.cpp's codepoint classes: dropped, whitespace, own-word outputs, and the changed ones' map."""
    from bpetok.models.wpm import _fast_tables

    from bpetok.models import wpm_data

    table, _ = _fast_tables(*_flags(tok))
    dropped: set[int] = set()

    starts, codes = wpm_data.CLASS_STARTS, wpm_data.CLASS_CODES
    for start, end, code in zip(starts, starts[1:] + (0x110000,), codes):
        if code == 1:  # llama.cpp's control class: dropped, whatever the flags
            dropped.update(cp for cp in range(start, end) if not 0xD800 <= cp <= 0xDFFF)
    whitespace: set[int] = set()
    own_word: set[int] = set()
    mapping: dict[str, str] = {}
    for cp, out in table.items():
        if 0xD800 <= cp <= 0xDFFF:
            continue
        if out == "":
            dropped.add(cp)
        elif out == " ":
            whitespace.add(cp)
        elif len(out) == 3 and out[0] == out[2] == " ":
            own_word.add(ord(out[1]))
            if out[1] != chr(cp):
                mapping[chr(cp)] = out[1]
        else:
            mapping[chr(cp)] = out
    # CJK ideographs beyond the BMP are words of their own too (wpm's table leaves them out).
    for first, last in ((0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0x2F800, 0x2FA1F)):
        own_word.update(range(first, last + 1))
    # The table wins over the class (llama.cpp looks at whitespace before the control class).
    dropped -= {cp for cp, out in table.items() if out}
    own_word -= dropped | whitespace
    return dropped, whitespace, own_word, mapping


def _char_class(cps: set[int]) -> str:
    """A regex class of exactly these codepoints, as both Oniguruma and the regex package read it."""
    runs: list[list[int]] = []
    for cp in sorted(cps):
        if runs and runs[-1][1] == cp - 1:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp])
    return "[" + "".join(_literal(a) if a == b else f"{_literal(a)}-{_literal(b)}" for a, b in runs) + "]"


def _literal(cp: int) -> str:
    """A codepoint inside a class: itself, escaped where either engine gives it a meaning (Oniguruma's
    ``&&`` is an intersection); Oniguruma's ``\\x{...}`` is no escape to the regex package."""
    c = chr(cp)
    return "\\" + c if c in "\\[]^-&" else c


_BREAKER_CP = 0x01


def wpm_normalizer_and_pre(tok: Tokenizer) -> tuple[dict, dict]:
    """(normalizer, pre_tokenizer) spelling out llama.cpp's word split."""
    import base64

    from bpetok_hf.charsmap_builder import build_charsmap

    dropped, whitespace, own_word, mapping = _classes(tok)
    steps: list[dict] = [
        {"type": "Replace", "pattern": {"Regex": _char_class(dropped)}, "content": ""},
        {"type": "Replace", "pattern": {"Regex": _char_class(whitespace)}, "content": " "},
    ]
    if mapping:
        # HF's Precompiled replaces a grapheme cluster under 6 bytes that starts with a key whole (an
        # uppercase letter's emoji modifier would go with it): a U+0001 after each key character ends
        # the cluster there (a control: UAX #29 GB5), and the map deletes it. U+0001 from the text is
        # a control llama.cpp drops, gone with the first Replace (a test holds it in ``dropped``).
        steps.append({"type": "Replace", "pattern": {"Regex": f"(?<={_char_class({ord(c) for c in mapping})})"},
                      "content": chr(_BREAKER_CP)})
        blob = build_charsmap({**mapping, chr(_BREAKER_CP): ""})
        steps.append({"type": "Precompiled", "precompiled_charsmap": base64.b64encode(blob).decode("ascii")})
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"},
        {"type": "Split", "pattern": {"Regex": _char_class(own_word)}, "behavior": "Isolated", "invert": False},
    ]}
    return {"type": "Sequence", "normalizers": steps}, pre


def wpm_model(tok: Tokenizer, texts: list[str]) -> dict:
    unk = tok.vocabulary.special_ids["unk"]
    return {"type": "WordPiece", "unk_token": texts[unk], "continuing_subword_prefix": "##",
            "max_input_chars_per_word": _NO_LIMIT, "vocab": {text: i for i, text in enumerate(texts)}}


def wpm_template(tok: Tokenizer, texts: list[str]) -> dict:
    """``[CLS] $A [SEP]``: llama.cpp's WordPiece add_special, whatever the add_* keys say."""
    cls, sep = tok.vocabulary.special_ids["bos"], tok.vocabulary.special_ids["sep"]
    a, b = {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}
    head, tail = {"SpecialToken": {"id": texts[cls], "type_id": 0}}, {"SpecialToken": {"id": texts[sep], "type_id": 0}}
    return {"type": "TemplateProcessing", "single": [head, a, tail], "pair": [head, a, tail, b, tail],
            "special_tokens": {texts[cls]: {"id": texts[cls], "ids": [cls], "tokens": [texts[cls]]},
                               texts[sep]: {"id": texts[sep], "ids": [sep], "tokens": [texts[sep]]}}}
