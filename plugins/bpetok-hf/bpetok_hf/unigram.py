"""Unigram tokenizer.json files (T5, XLM-R, mT5...) as Hugging Face tokenizers runs them, into the
``hf-unigram`` model registered here.

Each piece of text between added tokens is

1. normalized by the file's normalizer (``Precompiled``, HF's way: :mod:`bpetok_hf.precompiled`,
   and the ``Strip``/``Replace``/NFKC... steps of :mod:`bpetok_hf.normalize`);
2. split by the pre-tokenizer: ``WhitespaceSplit`` (words end at whitespace) if the file has
   it, then ``Metaspace``: each space becomes ``▁``, a ``▁`` goes before each word that does
   not start with one (``prepend_scheme`` ``always``; ``never``: none), and with ``split`` each
   ``▁`` starts a new piece;
3. cut by HF's Unigram Viterbi over each piece: every entry of ``model.vocab`` with its score (the
   added ones too), a character no entry starts with costing the lowest score minus 10 and giving
   ``unk_id``, consecutive unknowns of a piece fused into one. bpetok's ``t5`` Viterbi (its C
   lattice when built) runs it, with HF's pieces and unknown score instead of llama.cpp's.
"""

from __future__ import annotations

import math
import re

from bpetok import VocabularyError
from bpetok.models import ModelSpec
from bpetok.models.ugm import UnigramModel

from bpetok_hf.normalize import read_normalizer
from bpetok_hf.schema import array, describe, flag, text_of

__all__ = ["UNIGRAM_MODEL", "read_unigram_layout", "unigram_spec", "HFUnigramModel"]

UNIGRAM_MODEL = "hf-unigram"
LAYOUT = "hf.unigram"  # Vocabulary.metadata: the normalizer and the pre-tokenizer's options
NOT_IN_MODEL = "hf.not_in_model"  # ids of added tokens the model's vocab lacks
SPACE = "\u2581"
_UNK_PENALTY = 10.0


def _refuse(path: str, where: str, what: str) -> VocabularyError:
    return VocabularyError(
        f"{path}: {where} is {what}; bpetok-hf reads Unigram files whose pre-tokenizer is Metaspace (after a "
        "WhitespaceSplit or alone, prepend_scheme 'always' or 'never') or none, and refuses others rather than give "
        "ids that differ from Hugging Face tokenizers': convert this model to GGUF with llama.cpp's "
        "convert_hf_to_gguf.py instead"
    )


def _type(node) -> str | None:
    return node.get("type") if isinstance(node, dict) else None


def read_unigram_layout(data: dict, model: dict, path: str) -> dict:
    """The normalizer and pre-tokenizer options of a Unigram file; refused components named."""
    if flag(model, "byte_fallback", path, "model."):
        raise _refuse(path, "model.byte_fallback", "true (unknown characters as <0xXX> tokens)")
    normalizer = read_normalizer(data.get("normalizer"), path)
    pre = data.get("pre_tokenizer")
    items: list = array(pre, "pretokenizers", path, "pre_tokenizer.", required=True) if isinstance(pre, dict) and _type(pre) == "Sequence" else [pre]
    whitespace_split = False
    if items and _type(items[0]) == "WhitespaceSplit":
        whitespace_split, items = True, items[1:]
    metaspace = {"prepend": False, "split": False, "replace": False}
    if items == [None] or not items:
        if whitespace_split:
            raise _refuse(path, "pre_tokenizer", "WhitespaceSplit without Metaspace")
    elif len(items) == 1 and isinstance(items[0], dict) and _type(items[0]) == "Metaspace":
        node: dict = items[0]
        if text_of(node, "replacement", path, "pre_tokenizer.") != SPACE:
            raise _refuse(path, "pre_tokenizer.replacement", describe(node.get("replacement")))
        scheme = node.get("prepend_scheme", "always" if flag(node, "add_prefix_space", path, "pre_tokenizer.", True) else "never")
        if scheme not in ("always", "never"):
            raise _refuse(path, "pre_tokenizer.prepend_scheme", describe(scheme))
        metaspace = {"prepend": scheme == "always", "split": flag(node, "split", path, "pre_tokenizer.", default=True),
                     "replace": True}
    else:
        shown = " + ".join(str(_type(i) or describe(i)) for i in ([pre] if _type(pre) != "Sequence" else items)[:6])
        raise _refuse(path, "pre_tokenizer", repr(shown))
    return {"normalizer": normalizer, "whitespace_split": whitespace_split, **metaspace}


def unigram_scores(vocab: list, path: str) -> tuple[list[str], list[float]]:
    """Each ``[piece, score]`` of ``model.vocab``, checked."""
    from bpetok_hf.schema import bad

    pieces, scores = [], []
    for i, item in enumerate(vocab):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and item[0]
                and type(item[1]) in (int, float) and math.isfinite(item[1])):
            raise bad(path, f"model.vocab[{i}]", item, "a [piece, score] pair (a non-empty string, a finite number)")
        pieces.append(item[0])
        scores.append(float(item[1]))
    return pieces, scores


class HFUnigramModel(UnigramModel):
    """HF's Unigram pipeline over one fragment of text between added tokens (see the module docstring)."""

    def __init__(self, vocabulary, pretokenizer=None):
        self._skip = vocabulary.metadata.get(NOT_IN_MODEL, frozenset())
        super().__init__(vocabulary, pretokenizer)
        layout = vocabulary.metadata[LAYOUT]
        self.normalizer = layout["normalizer"]
        self.whitespace_split = layout["whitespace_split"]
        self.prepend, self.split, self.replace = layout["prepend"], layout["split"], layout["replace"]
        from bpetok_hf.normalize import WHITE_SPACE

        self._words = re.compile(f"[^{re.escape(WHITE_SPACE)}]+").findall
        self._pieces = re.compile(f"{SPACE}[^{SPACE}]*|[^{SPACE}]+").findall

    def scored_pieces(self, tokens, attrs, scores):
        """Every entry of the file's model.vocab (HF's trie), the lowest score of them all minus 10."""
        pieces = {text: (i, scores[i]) for i, text in enumerate(tokens) if i not in self._skip}
        lowest = min((s for i, s in enumerate(scores) if i not in self._skip), default=0.0)
        return pieces, lowest - _UNK_PENALTY, []

    def pretokenize(self, text: str) -> list[str]:
        """The pieces HF's pre-tokenizer makes of normalized text."""
        words = self._words(text) if self.whitespace_split else [text]
        out: list[str] = []
        for word in words:
            if self.replace:
                word = word.replace(" ", SPACE)
                if self.prepend and not word.startswith(SPACE):
                    word = SPACE + word
            if self.split:
                out += self._pieces(word)
            elif word:
                out.append(word)
        return out

    def _normalized_pieces(self, text: str) -> list[bytes]:
        if self.normalizer is not None:
            text = self.normalizer(text)
        return [p.encode("utf-8", "surrogatepass") for p in self.pretokenize(text)]

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        lattice = self.lattice()
        viterbi = lattice.viterbi if lattice is not None else self.viterbi
        ids: list[int] = []
        for piece in self._normalized_pieces(text):
            ids += viterbi(piece)
        return ids

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` with the Python Viterbi."""
        ids: list[int] = []
        for piece in self._normalized_pieces(text):
            ids += self.viterbi(piece)
        return ids

    def encode_fragment_bytes(self, data: bytes, at_start: bool) -> list[int]:
        return self.encode_fragment(data.decode("utf-8", "replace"), at_start)


def unigram_spec() -> ModelSpec:
    return ModelSpec(
        name=UNIGRAM_MODEL,
        factory=HFUnigramModel,
        pretokenized=False,
        special_ids={},
        add_bos=False,
        clean_spaces=False,
        add_space_prefix=False,
        description="a Unigram tokenizer.json (bpetok-hf): HF's Precompiled normalizer, Metaspace, Viterbi",
    )
