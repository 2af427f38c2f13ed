"""The tokenizer.json of a SentencePiece-style (``llama`` model) vocabulary: Llama 2, Mistral, Phi-3...

llama.cpp's SPM merges adjacent symbols whose concatenation is a token, the highest-scored token
first (leftmost on ties). HF's BPE merges the lowest-ranked pair of its ``merges``. So every cut of
every token into two tokens becomes a merge, ranked by the whole token's score (highest first):
a pair HF merges is exactly a pair llama.cpp could merge, in the same order. What ranks cannot say
is llama.cpp's leftmost rule between *different* tokens of one score whose pairs overlap; the tests
hold the result to llama.cpp's recorded ids.

Gemma 4 (``gemma4``) merges by rank already, as HF does; its runs of newlines are a ``Split``, and
llama.cpp's rule that a run of newlines that is a token is taken whole holds when the merges make
each such run that token, which the export checks.

The rest is HF's legacy Llama layout: a normalizer ``Prepend("▁")`` (when llama.cpp adds a space
prefix: at the start of each piece of text between added tokens, as llama.cpp does after a special
token) and ``Replace(" ", "▁")``, no pre-tokenizer, ``byte_fallback`` to the ``<0xXX>`` tokens, and
the decoder Replace/ByteFallback/Fuse(/Strip).
"""

from __future__ import annotations

import math

from bpetok import TokenAttr, Tokenizer

__all__ = ["spm_model", "spm_normalizer", "spm_decoder", "spm_refusal", "gemma4_model", "gemma4_refusal", "GEMMA4_SPLIT"]

# llama.cpp's gemma4 split: runs of newlines and the text between them (as a Split, Isolated).
GEMMA4_SPLIT = {"type": "Split", "pattern": {"Regex": "\n+"}, "behavior": "Isolated", "invert": False}

SPACE = "\u2581"


def spm_refusal(tok: Tokenizer) -> str | None:
    """Why this SPM vocabulary cannot be a tokenizer.json with llama.cpp's ids, or None."""
    vocab = tok.vocabulary
    scores = vocab.scores or []
    if not scores:
        return "it has no token scores (tokenizer.ggml.scores), the order its merges follow"
    if any(map(math.isnan, scores)):
        return "a token score is NaN: llama.cpp's merge order is then undefined"
    for b in range(256):
        if vocab.token_index().get(b"<0x%02X>" % b) is None:
            # llama.cpp then falls back to the one-byte token or fails; HF's byte_fallback has only <0xXX>.
            return f"it has no <0x{b:02X}> token, which HF's byte_fallback needs for every byte"
    return None


def _cuts(text: str):
    for i in range(1, len(text)):
        yield text[:i], text[i:]


def spm_model(tok: Tokenizer, texts: list[str]) -> dict:
    """HF's BPE model: every token in ``vocab``, every two-token cut of a token as a merge ranked by score."""
    vocab = tok.vocabulary
    index = {text: i for i, text in enumerate(texts)}
    scores = vocab.scores
    ranked = []
    for token_id, text in enumerate(texts):
        if vocab.attrs[token_id] & TokenAttr.BYTE or len(text) < 2:
            continue
        for left, right in _cuts(text):
            if left in index and right in index:
                # Highest score first; then the token's id, then the cut, only to make the file stable.
                ranked.append((-scores[token_id], token_id, len(left), left, right))
    ranked.sort()
    unk = vocab.special_ids.get("unk")
    return {
        "type": "BPE",
        "dropout": None,
        "unk_token": texts[unk] if unk is not None else None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": True,
        "byte_fallback": True,
        "ignore_merges": False,
        "vocab": index,
        "merges": [[left, right] for *_, left, right in ranked],
    }


def spm_normalizer(tok: Tokenizer) -> dict:
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
    if not tok.add_space_prefix:
        return replace
    return {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SPACE}, replace]}


def spm_decoder(tok: Tokenizer) -> dict:
    decoders = [
        {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
    ]
    if tok.add_space_prefix:
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {"type": "Sequence", "decoders": decoders}


def gemma4_refusal(tok: Tokenizer, texts: list[str]) -> str | None:
    """Why this gemma4 vocabulary cannot be a tokenizer.json with llama.cpp's ids, or None."""
    from bpetok.models.llama import merge_symbols

    vocab = tok.vocabulary
    index = {text: i for i, text in enumerate(texts)}
    for b in range(256):
        if f"<0x{b:02X}>" not in index:
            return f"it has no <0x{b:02X}> token (llama.cpp drops such a byte; HF's byte_fallback cannot)"
    ranks = {}
    for rank, merge in enumerate(vocab.merges):
        left, _, right = merge.decode("utf-8", "surrogatepass").partition(" ")
        if left + right not in index:
            return f"its merge {rank} makes {left + right!r:.40}, which is no token (HF's BPE merges only into tokens)"
        ranks.setdefault((left.encode(), right.encode()), rank)
    for text in texts:
        if text and set(text) == {"\n"}:
            data = text.encode()
            spans = merge_symbols(data, lambda a, b: ranks.get((a, b)))
            if len(spans) != 1:
                return (f"its merges do not make the newline-run token {text!r} whole, which llama.cpp takes whole "
                        "(HF's BPE would split it)")
    return None


def gemma4_model(tok: Tokenizer, texts: list[str]) -> dict:
    """HF's BPE model of a gemma4 vocabulary: its vocab and ranked merges, byte_fallback."""
    merges = [m.decode("utf-8", "surrogatepass").partition(" ") for m in tok.vocabulary.merges]
    return {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": True,
        "byte_fallback": True,
        "ignore_merges": False,
        "vocab": {text: i for i, text in enumerate(texts)},
        "merges": [[left, right] for left, _, right in merges],
    }
