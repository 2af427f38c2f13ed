"""WordPiece, llama.cpp's ``bert`` model (src/llama-vocab.cpp, ``llm_tokenizer_wpm_session``).

BERT-style GGUFs (bge, all-MiniLM, nomic-embed v1...) say ``tokenizer.ggml.model = bert``.
llama.cpp's converter stores a word-initial piece ``x`` as ``▁x`` and a continuation ``##x`` as
``x``. Each fragment of text between special tokens is first normalized and cut into words
(``preprocess``), one codepoint at a time, with llama.cpp's own Unicode tables
(:mod:`bpetok.models.wpm_data`):

- with ``strip_accents`` (``tokenizer.ggml.normalizer.strip_accents``, default: ``lowercase``),
  each codepoint becomes the first codepoint of its canonical decomposition ("é" -> "e"), and
  everything after that looks at that codepoint;
- whitespace ends a word; NUL, U+FFFD and controls (``\\p{C}``) are dropped, and so are marks
  (``\\p{M}``) with ``strip_accents``;
- punctuation, ASCII symbols and CJK ideographs are words of their own;
- every other codepoint, lowercased with ``lowercase`` (``tokenizer.ggml.normalizer.lowercase``,
  default true), joins the current word.

Then each word, with ``▁`` in front, is cut greedily from the left into the longest tokens of
the vocabulary (compared as bytes); a word with any position no token starts at is ``[UNK]``.

``bpetok/models/_wpm.c`` does the split and the cut in one pass over the text in C (the tables
above as one entry per BMP codepoint, the tokens as a byte trie). Without it (pure-Python engine)
the split runs as ``str.translate`` and ``str.split`` (:meth:`WordPieceModel.words`) and ids are
cached per word (:class:`bpetok.cache.IdCache`, the Tokenizer's pieces cache), since the cut
depends on the word alone. :meth:`WordPieceModel.encode_fragment_reference` is the readable
codepoint-by-codepoint twin that tests hold both fast paths equal to.
"""

from __future__ import annotations

import functools
import re
from array import array
from bisect import bisect_right
from itertools import chain
from typing import TYPE_CHECKING

from bpetok.cache import as_ids
from bpetok.compiled import compiled_module, warn_not_built
from bpetok.errors import VocabularyError
from bpetok.hookspecs import hookimpl
from bpetok.models import ModelSpec
from bpetok.models.base import CachingModel
from bpetok.models import wpm_data
from bpetok.pretok.unicode_data import WHITESPACE

if TYPE_CHECKING:
    import numpy as np  # offsets only: loading a tokenizer does not import numpy

__all__ = ["WordPieceModel", "preprocess", "preprocess_with_sources"]

SPACE = "\u2581"
_SPACE_BYTES = SPACE.encode()
_OTHER, _DROPPED, _MARK, _PUNCT, _SYM = range(5)


def _is_chinese(cpt: int) -> bool:
    """llama.cpp's ``is_chinese_char`` (its 0x2B920 start, not 0x2B820, follows HF's Rust code)."""
    return (
        0x4E00 <= cpt <= 0x9FFF or 0x3400 <= cpt <= 0x4DBF or 0x20000 <= cpt <= 0x2A6DF
        or 0x2A700 <= cpt <= 0x2B73F or 0x2B740 <= cpt <= 0x2B81F or 0x2B920 <= cpt <= 0x2CEAF
        or 0xF900 <= cpt <= 0xFAFF or 0x2F800 <= cpt <= 0x2FA1F
    )


def _class_of(cpt: int) -> int:
    return wpm_data.CLASS_CODES[bisect_right(wpm_data.CLASS_STARTS, cpt) - 1]


def _nfd(cpt: int) -> int:
    ranges = wpm_data.NFD_RANGES
    k = bisect_right(ranges, (cpt, 0x110000, 0)) - 1
    if k >= 0 and ranges[k][0] <= cpt <= ranges[k][1]:
        return ranges[k][2]
    return cpt


def preprocess(text: str, lowercase: bool = True, strip_accents: bool = True) -> list[str]:
    """llama.cpp's ``preprocess``: the words of ``text``, codepoint by codepoint (the reference)."""
    return [word for word, _ in preprocess_with_sources(text, lowercase, strip_accents)]


def preprocess_with_sources(text: str, lowercase: bool = True, strip_accents: bool = True) -> list[tuple[str, list[int]]]:
    """:func:`preprocess`'s words, each with the index in ``text`` of every one of its characters
    (each comes from exactly one codepoint: the tables map one to one)."""
    words: list[tuple[str, list[int]]] = [("", [])]
    for at, ch in enumerate(text):
        cpt = _nfd(ord(ch)) if strip_accents else ord(ch)
        if cpt in WHITESPACE:
            if words[-1][0]:
                words.append(("", []))
            continue
        cls = _class_of(cpt)
        if cpt == 0 or cpt == 0xFFFD or cls == _DROPPED or (strip_accents and cls == _MARK):
            continue
        s = chr(wpm_data.LOWERCASE.get(cpt, cpt) if lowercase else cpt)
        if cls == _PUNCT or (cpt < 0x7F and cls == _SYM) or _is_chinese(cpt):
            if words[-1][0]:
                words.append(("", []))
            words[-1] = (s, [at])
            words.append(("", []))
        else:
            word, sources = words[-1]
            sources.append(at)
            words[-1] = (word + s, sources)
    if not words[-1][0]:
        words.pop()
    return words


@functools.lru_cache(maxsize=4)
def _fast_tables(lowercase: bool, strip_accents: bool) -> tuple[dict[int, str], re.Pattern[str]]:
    """:func:`preprocess` as one ``str.translate`` table and one pattern of dropped codepoints.

    Each codepoint is handled on its own, so the text can be mapped in C: the table turns
    whitespace into " ", a word-of-its-own character into " c ", marks (with strip_accents)
    and ASCII controls into nothing and the rest into its decomposed, lowercased self; the
    pattern removes the other controls, whose runs are long (private use planes) and so kept
    out of the table. Splitting the result at whitespace then gives the words.
    """
    candidates = set(range(128)) | set(wpm_data.LOWERCASE) | set(WHITESPACE) | {0xFFFD}
    for first, last, _ in wpm_data.NFD_RANGES:
        candidates.update(range(first, last + 1))
    starts, codes = wpm_data.CLASS_STARTS, wpm_data.CLASS_CODES
    dropped_runs = []
    for start, end, code in zip(starts, starts[1:] + (0x110000,), codes):
        if code in (_PUNCT, _SYM, _MARK):
            candidates.update(range(start, end))
        elif code == _DROPPED:
            dropped_runs.append((start, end - 1))
    for first, last in ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0xF900, 0xFAFF)):  # CJK in the BMP
        candidates.update(range(first, last + 1))
    table: dict[int, str] = {}
    for cpt in candidates:
        out = _map_one(cpt, lowercase, strip_accents)
        if out != chr(cpt):
            table[cpt] = out
    parts = [re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in dropped_runs]
    return table, re.compile("[" + "".join(parts) + "]+")


def _map_one(cpt: int, lowercase: bool, strip_accents: bool) -> str:
    """What :func:`preprocess` makes of one codepoint: " " (a word boundary), "" (dropped),
    " c " (a word of its own) or the character it becomes."""
    base = _nfd(cpt) if strip_accents else cpt
    if base in WHITESPACE:
        return " "
    cls = _class_of(base)
    if base == 0 or base == 0xFFFD or cls == _DROPPED or (strip_accents and cls == _MARK):
        return ""
    s = chr(wpm_data.LOWERCASE.get(base, base) if lowercase else base)
    if cls == _PUNCT or (base < 0x7F and cls == _SYM) or _is_chinese(base):
        return " " + s + " "
    return s


def _kernel_tables(lowercase: bool, strip_accents: bool) -> tuple:
    """:mod:`bpetok.models.wpm_data`'s tables as the arrays ``_wpm.Wpm`` takes."""
    nfd = array("I", [v for triple in wpm_data.NFD_RANGES for v in triple])
    pairs = sorted(wpm_data.LOWERCASE.items())
    return (
        array("I", wpm_data.CLASS_STARTS), bytes(wpm_data.CLASS_CODES), nfd,
        array("I", [a for a, _ in pairs]), array("I", [b for _, b in pairs]),
        array("I", sorted(WHITESPACE)), lowercase, strip_accents,
    )


def _sorted_tokens(ids: dict[bytes, int]) -> tuple[bytes, array, array]:
    """The vocabulary as ``_wpm.Wpm`` takes it: its texts sorted, back to back, with offsets and ids
    (the empty text matches nothing: left out)."""
    texts = sorted(text for text in ids if text)
    offsets = array("I", [0])
    total = 0
    for text in texts:
        total += len(text)
        offsets.append(total)
    return b"".join(texts), offsets, array("i", [ids[text] for text in texts])


# CJK ideographs beyond the BMP are words of their own too; the table leaves them out (60k
# entries), so text that has any goes the reference way.
_ASTRAL_CJK = re.compile("[\U00020000-\U0002FA1F]")


class WordPieceModel(CachingModel):
    """Longest-match-first WordPiece over llama.cpp's word split (see the module docstring)."""

    def __init__(self, vocabulary, pretokenizer=None):
        self.path = vocabulary.path
        self.ids = vocabulary.token_index()
        self.tokens = vocabulary.tokens
        unk = vocabulary.special_ids.get("unk")
        self.unk = unk
        self.max_token_len = max(map(len, vocabulary.tokens), default=0)
        try:  # the same index by text, when every token is UTF-8 (see encode_word)
            self.text_ids: dict[str, int] | None = {t.decode(): i for t, i in self.ids.items()}
        except UnicodeDecodeError:
            self.text_ids = None
        self.longest_text = max(map(len, self.text_ids), default=0) if self.text_ids else 0
        self.lowercase = bool(vocabulary.flags.get("normalizer_lowercase", True))
        self.strip_accents = bool(vocabulary.flags.get("normalizer_strip_accents", self.lowercase))
        self._table, self._dropped = _fast_tables(self.lowercase, self.strip_accents)
        module = compiled_module("bpetok.models._wpm")
        if module is None:
            warn_not_built("bpetok.models._wpm")
        self._kernel = module.Wpm(*_kernel_tables(self.lowercase, self.strip_accents), *_sorted_tokens(self.ids)) if module else None
        self.compiled = self._kernel is not None

    def use_cache_budget(self, cache_bytes: int) -> None:
        """The word cache (the kernel's own, or the pure-Python engine's): a quarter of ``cache_bytes``."""
        super().use_cache_budget(cache_bytes)
        if self._kernel is not None:
            self._kernel.set_cache_budget(self._cache.budget)

    def cache_info(self) -> dict[str, dict[str, int]]:
        if self._kernel is None:
            return super().cache_info()
        entries, used, budget = self._kernel.cache_stats()
        return {"pieces": {"entries": entries, "bytes": used, "budget": budget}}

    def words(self, text: str) -> list[str]:
        """:func:`preprocess` in C-speed steps (held equal to it by tests)."""
        mapped = text.translate(self._table)
        if not mapped.isascii():
            if _ASTRAL_CJK.search(mapped):
                return preprocess(text, self.lowercase, self.strip_accents)
            mapped = self._dropped.sub("", mapped)
        # No character the table keeps is whitespace to Python but not to llama.cpp (U+001C..
        # U+001F are controls, dropped): str.split() cuts exactly at the word boundaries.
        return mapped.split()

    def text_encoder(self, automata):
        """The kernel's ``encode_cut``: the text cut at its special tokens by the automaton
        (``Automaton.cuts``) and each fragment encoded from the str itself, in one C call."""
        built = self._own_automata(automata, WordPieceModel) if self._kernel is not None else None
        if built is None:
            return None
        return functools.partial(self._kernel.encode_cut, -1 if self.unk is None else self.unk, *built)

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        """Ids of one fragment of text between special tokens: the kernel's, or each word's from
        the cache, the missing ones cut and cached first."""
        kernel = self._kernel
        if kernel is not None:
            found_ids = kernel.encode(text, -1 if self.unk is None else self.unk)
            # None: a word without tokens and no unknown token; the twin raises the error.
            return found_ids if found_ids is not None else self.encode_fragment_reference(text, at_start)
        words = self.words(text)
        cache = self._cache
        found = list(map(cache.get, words))
        if None in found:
            encode_word = self.encode_word
            for k in [k for k, ids in enumerate(found) if ids is None]:
                word = words[k]
                ids = found[k] = cache.get(word)  # an earlier miss may have cached it
                if ids is None:
                    ids = found[k] = as_ids(encode_word(word))
                    cache.keep(word, ids)
        return list(chain.from_iterable(found))  # type: ignore[arg-type]  # every miss was filled above

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` the plain way: :func:`preprocess`, no cache."""
        ids: list[int] = []
        for word in preprocess(text, self.lowercase, self.strip_accents):
            ids += self.encode_word(word)
        return ids

    def encode_word(self, word: str) -> list[int]:
        """The longest tokens that make up ``▁word``, left to right, or ``[UNK]``.

        llama.cpp compares byte strings; when every token is valid UTF-8 only cuts at character
        boundaries can match, so the text is cut by characters (fewer tries), else by bytes."""
        if self.text_ids is not None:
            data: str | bytes = SPACE + word
            get, longest = self.text_ids.get, self.longest_text
        else:
            data = _SPACE_BYTES + word.encode("utf-8", "surrogatepass")
            get, longest = self.ids.get, self.max_token_len
        ids, n, i = [], len(data), 0
        while i < n:
            for j in range(min(n, i + longest), i, -1):
                token_id = get(data[i:j])  # type: ignore[arg-type]  # str keys for str data
                if token_id is not None:
                    ids.append(token_id)
                    i = j
                    break
            else:
                ids = []
                break
        if ids:
            return ids
        if self.unk is None:
            raise VocabularyError(
                f"{self.path}: the word {word!r} has no WordPiece tokens and the vocabulary has no unknown "
                "token; set tokenizer.ggml.unknown_token_id"
            )
        return [self.unk]

    def normal_piece(self, text: bytes) -> bytes:
        """A NORMAL token's bytes: its text with ``▁`` back to spaces."""
        return text.replace(_SPACE_BYTES, b" ")

    def aligns_offsets(self, text: str) -> bool:
        return True

    def token_offsets(self, tok, text: str, ids: list[int], add_special: bool):
        """Each token's span (:mod:`bpetok.models.norm_offsets`): every normalized character
        comes from one character of the text; a token spans the characters its text (less
        ``##``) was made of, and ``[UNK]`` its whole word. The kernel's spans where it is built
        (:meth:`fragment_span_rows`), else, or where they do not give ``ids``, the twin's."""
        from bpetok.models.norm_offsets import spans_of_fragment_arrays, spans_of_fragments

        if self._kernel is not None:
            found = spans_of_fragment_arrays(tok, text, ids, add_special, self.fragment_span_rows)
            if found is not None:
                return found
        return spans_of_fragments(tok, text, ids, add_special, self.fragment_spans, in_bytes=False)

    def encode_with_offsets(self, tok, text: str, parse_special: bool, add_special: bool):
        """The ids and spans in one call of the kernel, the text cut at its specials by the
        automaton encode uses (``Wpm.encode_cut_spans``), else fragment by fragment of the
        partition; the kernel gives :meth:`encode_fragment`'s ids (not where a subclass cuts
        otherwise: encode, then :meth:`token_offsets`)."""
        if self._kernel is None or type(self).encode_fragment is not WordPieceModel.encode_fragment:
            return None
        from bpetok.models.norm_offsets import encode_with_fragment_arrays, of_span_buffer
        from bpetok.offsets import _added

        automata = tok._special_table.automata()
        if automata is not None:
            found = self._kernel.encode_cut_spans(-1 if self.unk is None else self.unk, *automata, text, parse_special)
            if found is not None:
                return of_span_buffer(text, found, _added(tok, add_special))
        return encode_with_fragment_arrays(tok, text, parse_special, add_special, self.fragment_span_rows)

    def fragment_span_rows(self, fragment: str) -> np.ndarray | None:
        """:meth:`fragment_spans` from the kernel: an ``(n, 5)`` int64 array of id, character start
        and end, byte start and end, or None (a word without tokens and no unknown token: the
        twin raises the error)."""
        import numpy as np

        found = self._kernel.encode_with_spans(fragment, -1 if self.unk is None else self.unk)
        return None if found is None else np.frombuffer(found, dtype=np.int64).reshape(-1, 5)

    def fragment_spans(self, fragment: str) -> list[tuple[int, int, int]]:
        """(id, start, end) of each token of ``fragment`` in its characters: the reference's cut."""
        out = []
        for word, sources in preprocess_with_sources(fragment, self.lowercase, self.strip_accents):
            ids = self.encode_word(word)
            if ids == [self.unk] and self.tokens[self.unk] != _SPACE_BYTES + word.encode("utf-8", "surrogatepass"):
                out.append((ids[0], sources[0], sources[-1] + 1))
                continue
            # the character each byte of the word is in: the tokens may cut between bytes
            char_of_byte = [k for k, ch in enumerate(word) for _ in ch.encode("utf-8", "surrogatepass")]
            at = -len(_SPACE_BYTES)  # the first token's text starts with the word's ▁
            for token_id in ids:
                end = at + len(self.tokens[token_id])
                first = max(at, 0)
                if end <= first:  # only the ▁: no character of the text
                    out.append((token_id, sources[0], sources[0]))
                else:
                    out.append((token_id, sources[char_of_byte[first]], sources[char_of_byte[end - 1]] + 1))
                at = end
        return out


# What this plugin registers: the model, and llama.cpp's defaults for it.
MODEL_SPEC = ModelSpec(
    name="bert", factory=WordPieceModel, pretokenized=False,
    description="WordPiece (BERT): lowercase/accent-stripping word split, longest match first, [UNK]",
    special_ids={"bos": 101, "unk": 100, "sep": 102, "pad": 0, "mask": 103},
    # adds_bos_sep: [CLS] ... [SEP], whatever the file's add_* keys say
    add_bos=True, adds_bos_sep=True, clean_spaces=True, add_space_prefix=False,
)


@hookimpl
def bpetok_register_models(register) -> None:
    register(MODEL_SPEC)
