"""The tokenizer.json of a ``t5`` (Unigram) vocabulary.

t5: llama.cpp's UGM session, per piece of text between special tokens, replaces the longest key
of the precompiled charsmap at each position, turns spaces into ``▁`` (with
``remove_extra_whitespaces``: one ``▁`` before each run of non-spaces, none left over; else each
space, plus one before the first non-space with ``add_space_prefix``) and runs one Viterbi over
the whole piece. As HF:

- normalizer: a ``Replace`` ending grapheme clusters (below), ``Precompiled`` (the GGUF's own
  charsmap), then ``Replace`` steps for the spaces
  (``" +"`` to one, ``\\A | \\z`` removed, ``Prepend("▁")``, ``" "`` to ``▁``);
- no pre-tokenizer (one Viterbi over the whole piece, no ``▁`` split);
- a ``Unigram`` model of every token with its score (USER_DEFINED ones at 0, as llama.cpp
  scores them), ``unk_id`` the unknown token; BOS/EOS as llama.cpp's add_special adds them a
  ``TemplateProcessing``.

What HF cannot say: its ``Precompiled`` replaces a short grapheme cluster starting with a key
whole (``Ａ`` + U+0301 becomes ``A``), llama.cpp keeps the mark. A U+0001 (deleted by the map)
after each character no longer key starts with ends the cluster there; after a character that
starts a longer key (``a`` + U+0308 + U+0301) it cannot be placed by a regex, and the mark goes. HF's Viterbi also sees the
CONTROL tokens' texts (llama.cpp's does not) and takes its unknown score from every piece
(llama.cpp's from the NORMAL ones), so a score below the lowest NORMAL one (the ``[PADn]``
fillers' -10000) is written as that lowest: a text holding a filler's own text (``[PAD250001]``)
can then be cut otherwise.
"""

from __future__ import annotations

import base64

from bpetok import TokenAttr, Tokenizer
from bpetok.vocab import CHARSMAP_KEY

__all__ = ["t5_refusal", "t5_model", "t5_normalizer", "T5_DECODER"]

SPACE = "\u2581"
T5_DECODER = {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": False}


def t5_refusal(tok: Tokenizer) -> str | None:
    """Why this t5 vocabulary cannot be a tokenizer.json with llama.cpp's ids, or None."""
    vocab = tok.vocabulary
    scores = vocab.scores or []
    if len(scores) != vocab.n_tokens:
        return "it has no token scores (tokenizer.ggml.scores), which Unigram's Viterbi needs"
    if any(s != s for s in scores):
        return "a token score is NaN: the best cut is then undefined"
    if vocab.special_ids.get("unk") is None:
        return "it has no unknown token (tokenizer.ggml.unknown_token_id), which HF's Unigram needs"
    if not any(a & TokenAttr.NORMAL for a in vocab.attrs):
        return "it has no NORMAL token, whose lowest score llama.cpp's unknown-character cost comes from"
    return None


def t5_normalizer(tok: Tokenizer) -> dict | None:
    """Precompiled (the GGUF's charsmap) and llama.cpp's space rules as Replace/Prepend steps."""
    flags = tok.vocabulary.flags
    steps: list[dict] = []
    charsmap = tok.vocabulary.metadata.get(CHARSMAP_KEY)
    if charsmap:
        breaker = _cluster_breaker(bytes(charsmap), tok.vocabulary.path)
        if breaker is not None:
            steps.append(breaker)
        steps.append({"type": "Precompiled", "precompiled_charsmap": base64.b64encode(bytes(charsmap)).decode("ascii")})
    if flags.get("remove_extra_whitespaces", False):
        steps += [
            _replace(" +", " "),
            _replace(r"\A | \z", ""),
            {"type": "Prepend", "prepend": SPACE},
        ]
    elif flags.get("add_space_prefix", False):
        steps.append(_replace(r"\A(?=[\s\S]*[^ ])", SPACE))  # one ▁ in front when there is a non-space
    steps.append({"type": "Replace", "pattern": {"String": " "}, "content": SPACE})
    return {"type": "Sequence", "normalizers": steps}


def _cluster_breaker(blob: bytes, path: str) -> dict | None:
    """A Replace putting U+0001 after each character whose key no longer key extends: HF's Precompiled
    then ends the grapheme cluster there (U+0001 is a control) and the map deletes it, so a mark after
    such a character is no longer swallowed with it. None when the map does not delete U+0001."""
    from bpetok.models.charsmap import CharsMap

    from bpetok_hf.writer_wpm import _char_class

    charsmap = CharsMap(blob, f"{path}: {CHARSMAP_KEY}")
    fast = charsmap._fast
    if fast is None or charsmap.normalize(_BREAKER.encode()) != b"" or _BREAKER in fast[1]:
        return None
    table, starters = fast[0], fast[1]
    alone = {cp for cp in table if chr(cp) not in starters}
    return _replace(f"(?<={_char_class(alone)})", _BREAKER) if alone else None


_BREAKER = "\x01"


def _replace(pattern: str, content: str) -> dict:
    return {"type": "Replace", "pattern": {"Regex": pattern}, "content": content}


def t5_model(tok: Tokenizer, texts: list[str]) -> dict:
    """HF's Unigram model: every token with its score, USER_DEFINED ones at llama.cpp's 0, none below
    the lowest NORMAL score (HF's unknown-character cost comes from the lowest of all, llama.cpp's
    from the NORMAL ones: the [PADn] fillers' -10000 would make it 1000 times dearer)."""
    vocab = tok.vocabulary
    lowest = min(s for s, a in zip(vocab.scores, vocab.attrs) if a & TokenAttr.NORMAL)
    pieces = []
    for text, score, attr in zip(texts, vocab.scores, vocab.attrs):
        pieces.append([text, 0.0 if attr & TokenAttr.USER_DEFINED else max(float(score), lowest)])
    return {"type": "Unigram", "unk_id": vocab.special_ids["unk"], "vocab": pieces, "byte_fallback": False}
