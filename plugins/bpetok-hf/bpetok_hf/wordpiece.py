"""WordPiece tokenizer.json files (BERT): ``BertNormalizer``, ``BertPreTokenizer``, the ``WordPiece``
model, as Hugging Face tokenizers runs them, into the ``hf-wordpiece`` model registered here.

- ``BertNormalizer``, one character at a time, in HF's order: ``clean_text`` removes controls
  (and NUL, U+FFFD) and makes whitespace a space; ``handle_chinese_chars`` puts spaces around CJK
  ideographs; ``strip_accents`` (default: ``lowercase``) decomposes and drops nonspacing marks;
  ``lowercase`` is Rust's full lowercase mapping. Each step's classes are HF's own
  (:mod:`bpetok_hf.bert_data`, asked of tokenizers by scripts/bert_tables.py).
- ``BertPreTokenizer``: words end at whitespace; each punctuation character is a word of its own.
  ``WhitespaceSplit`` (words end at whitespace) is read too.
- ``WordPiece``: each word of at most ``max_input_chars_per_word`` characters is cut greedily
  from the left into the longest vocabulary entries, each after the first with the
  ``continuing_subword_prefix`` (``##``); a word with a position no entry starts at, or a longer
  word, is the unknown token.

llama.cpp's ``bert`` model (bpetok.models.wpm) differs from this: it decomposes to the first
codepoint only (a Hangul syllable to its first jamo), uses its own Unicode 15.1 tables and
matches ``▁``-marked tokens anywhere in a word; this model is what a tokenizer.json means.
"""

from __future__ import annotations

import functools
import re
from itertools import chain

from bpetok import VocabularyError
from bpetok.cache import as_ids
from bpetok.models import ModelSpec
from bpetok.models.base import CachingModel

from bpetok_hf.schema import describe, flag, text_of

__all__ = ["WORDPIECE_MODEL", "BertNormalizer", "read_bert_layout", "wordpiece_spec", "HFWordPieceModel"]

WORDPIECE_MODEL = "hf-wordpiece"
LAYOUT = "hf.wordpiece"  # Vocabulary.metadata: the normalizer's flags, the splitter, the model's options
NOT_IN_MODEL = "hf.not_in_model"  # ids of added tokens the model's vocab lacks (never matched in a word)
# HF's default; a JSON integer past this is no real limit anyway.
_MAX_WORD_CHARS = 100


def _refuse(path: str, where: str, what: str) -> VocabularyError:
    return VocabularyError(
        f"{path}: {where} is {what}; bpetok-hf reads WordPiece files with a BertNormalizer (or none), a "
        "BertPreTokenizer or WhitespaceSplit and a WordPiece model, and refuses others rather than give ids that "
        "differ from Hugging Face tokenizers': convert this model to GGUF with llama.cpp's convert_hf_to_gguf.py instead"
    )


def _class(runs) -> str:
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in runs)


class BertNormalizer:
    """HF's ``BertNormalizer`` as a callable: ``normalizer(text)`` is HF's normalized text."""

    def __init__(self, clean_text: bool, chinese: bool, strip_accents: bool, lowercase: bool):
        self.options = (clean_text, chinese, strip_accents, lowercase)
        self._table, self._removed = _tables(*self.options)

    def __call__(self, text: str) -> str:
        if self._removed is not None:
            text = self._removed.sub("", text)
        return text.translate(self._table)


@functools.lru_cache(maxsize=8)
def _tables(clean_text: bool, chinese: bool, strip_accents: bool, lowercase: bool):
    """One ``str.translate`` table for the steps after removal, and the pattern of removed codepoints."""
    from bpetok_hf import bert_data as data

    steps: list[dict[int, str]] = []
    if clean_text:
        steps.append({cp: " " for a, b in data.CLEAN_SPACE for cp in range(a, b + 1)})
    if chinese:
        steps.append({cp: f" {chr(cp)} " for a, b in data.CHINESE for cp in range(a, b + 1)})
    if strip_accents:
        steps.append(data.STRIP_ACCENTS)
    if lowercase:
        steps.append(data.LOWERCASE)
    table: dict[int, str] = {}
    for cp in set().union(*steps) if steps else ():
        out = chr(cp)
        for step in steps:  # each step maps every character the one before made
            out = "".join(step.get(ord(c), c) for c in out)
        if out != chr(cp):
            table[cp] = out
    removed = re.compile(f"[{_class(data.CLEAN_REMOVED)}]+") if clean_text else None
    return table, removed


def _node_type(node) -> str | None:
    return node.get("type") if isinstance(node, dict) else None


def read_bert_layout(data: dict, model: dict, path: str) -> dict:
    """What the normalizer, pre-tokenizer and WordPiece model of a WordPiece file say; refused
    components are named."""
    normalizer, pre = data.get("normalizer"), data.get("pre_tokenizer")
    steps = None  # any other normalizer bpetok-hf reads (bpetok's export of a bert GGUF: Replace + Precompiled)
    if normalizer is None:
        options = (False, False, False, False)
    elif _node_type(normalizer) == "BertNormalizer":
        lowercase = flag(normalizer, "lowercase", path, "normalizer.", default=True)
        options = (
            flag(normalizer, "clean_text", path, "normalizer.", default=True),
            flag(normalizer, "handle_chinese_chars", path, "normalizer.", default=True),
            flag(normalizer, "strip_accents", path, "normalizer.", default=lowercase),  # null: as lowercase
            lowercase,
        )
    else:
        from bpetok_hf.normalize import read_normalizer

        options, steps = (False, False, False, False), read_normalizer(normalizer, path)
    isolate = None
    items = pre.get("pretokenizers") if _node_type(pre) == "Sequence" and isinstance(pre, dict) else None
    if isinstance(items, list) and len(items) == 2 and _node_type(items[0]) == "WhitespaceSplit":
        isolate = _isolated_split(items[1], path)
        pre = items[0]
    if _node_type(pre) not in ("BertPreTokenizer", "WhitespaceSplit"):
        raise _refuse(path, "pre_tokenizer", f"type {describe(_node_type(pre) or pre)}")
    prefix = text_of(model, "continuing_subword_prefix", path, "model.")
    prefix = "##" if prefix is None else prefix
    limit = model.get("max_input_chars_per_word", _MAX_WORD_CHARS)
    if type(limit) is not int or limit < 0:
        raise _refuse(path, "model.max_input_chars_per_word", describe(limit))
    return {"normalizer": options, "steps": steps, "punctuation": _node_type(pre) == "BertPreTokenizer",
            "isolate": isolate, "prefix": prefix, "max_chars": limit}


def _isolated_split(node, path: str) -> str:
    """The regex of a ``Split`` (Isolated, not inverted) after a WhitespaceSplit."""
    from bpetok_hf.pretok import checked_regex

    where = "pre_tokenizer.pretokenizers[1]"
    pattern = node.get("pattern") if isinstance(node, dict) else None
    if (_node_type(node) != "Split" or not isinstance(pattern, dict) or not isinstance(pattern.get("Regex"), str)
            or node.get("behavior") != "Isolated" or flag(node, "invert", path, f"{where}.")):
        raise _refuse(path, where, "not a Split of a regex, Isolated, not inverted")
    return checked_regex(pattern["Regex"], path, f"{where}.pattern.Regex")


@functools.lru_cache(maxsize=2)
def _splitter(punctuation: bool) -> re.Pattern[str]:
    """Words: runs of neither whitespace nor (with ``punctuation``) punctuation, and each punctuation character."""
    from bpetok_hf import bert_data as data

    space = _class(data.WHITESPACE)
    if not punctuation:
        return re.compile(f"[^{space}]+")
    punct = _class(data.PUNCTUATION)
    return re.compile(f"[{punct}]|[^{space}{punct}]+")


def _isolating(words, pattern: str):
    """``words``, each cut around the matches of ``pattern`` (HF's Split, Isolated)."""
    import regex

    finditer = regex.compile(pattern).finditer

    def split(text: str) -> list[str]:
        out = []
        for word in words(text):
            at = 0
            for match in finditer(word):
                if match.start() > at:
                    out.append(word[at : match.start()])
                if match.end() > match.start():
                    out.append(match.group())
                at = match.end()
            if at < len(word):
                out.append(word[at:])
        return out

    return split


class HFWordPieceModel(CachingModel):
    """HF's BERT pipeline over one fragment of text between added tokens (see the module docstring)."""

    def __init__(self, vocabulary, pretokenizer=None):
        layout = vocabulary.metadata[LAYOUT]
        self.path = vocabulary.path
        self.normalize = layout["steps"] or BertNormalizer(*layout["normalizer"])
        self.words = _splitter(layout["punctuation"]).findall
        if layout["isolate"] is not None:
            self.words = _isolating(self.words, layout["isolate"])
        self.prefix = layout["prefix"]
        self.max_chars = layout["max_chars"]
        skip = vocabulary.metadata.get(NOT_IN_MODEL, frozenset())
        texts = {t.decode("utf-8", "surrogatepass"): i for i, t in enumerate(vocabulary.tokens) if i not in skip}
        self.first = texts
        n = len(self.prefix)
        self.rest = {t[n:]: i for t, i in texts.items() if t.startswith(self.prefix) and len(t) > n}
        self.longest = max(map(len, texts), default=0)
        self.unk = vocabulary.special_ids.get("unk")

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        cache = self._cache
        out = []
        for word in self.words(self.normalize(text)):
            ids = cache.get(word)
            if ids is None:
                ids = as_ids(self.encode_word(word))
                cache.keep(word, ids)
            out.append(ids)
        return list(chain.from_iterable(out))

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` without the word cache."""
        ids: list[int] = []
        for word in self.words(self.normalize(text)):
            ids += self.encode_word(word)
        return ids

    def encode_word(self, word: str) -> list[int]:
        """HF's WordPiece: longest entries left to right, ``##`` after the first; else the unknown token."""
        n = len(word)
        ids: list[int] = []
        if n <= self.max_chars:
            start, table = 0, self.first
            while start < n:
                for end in range(min(n, start + self.longest), start, -1):
                    found = table.get(word[start:end])
                    if found is not None:
                        ids.append(found)
                        start, table = end, self.rest
                        break
                else:
                    ids = []
                    break
        if ids:
            return ids
        if self.unk is None:
            raise VocabularyError(f"{self.path}: the word {word[:40]!r} has no WordPiece tokens and model.unk_token "
                                  "is no token of the vocabulary; Hugging Face tokenizers fails on it too")
        return [self.unk]

    def normal_piece(self, text: bytes) -> bytes:
        """HF's WordPiece decoder: a continuation joins the piece before it, a word starts with a space."""
        prefix = self.prefix.encode()
        return text[len(prefix):] if prefix and text.startswith(prefix) else b" " + text


def wordpiece_spec() -> ModelSpec:
    return ModelSpec(
        name=WORDPIECE_MODEL,
        factory=HFWordPieceModel,
        pretokenized=False,
        special_ids={},
        add_bos=False,
        clean_spaces=False,
        add_space_prefix=True,  # the first word's space is no part of the text
        description="a WordPiece tokenizer.json (bpetok-hf): HF's BertNormalizer, BertPreTokenizer, ## pieces",
    )
