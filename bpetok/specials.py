"""The special-token table of one vocabulary and llama.cpp's partition of a text at its specials.

llama.cpp (``tokenizer_st_partition``) takes every CONTROL/USER_DEFINED/UNKNOWN token, longest
UTF-8 text first (ties by id), and cuts each out of every remaining raw fragment before trying the
next: leftmost first and non-overlapping within a fragment, an LSTRIP/RSTRIP token also eating the
ASCII C-isspace next to it inside the fragment. So the order is longest-first globally, not
leftmost-longest: with specials ``ABC`` and ``CDEF``, ``ABCDEF`` gives ``AB`` + ``CDEF``.

:func:`partition_reference` is that algorithm written out; its cost is (specials) x (text).
The C twin (``bpetok/_specials.c``) gives the same fragments in one Aho-Corasick pass over the
text's UTF-8 and a replay of the cuts in that order (see its header comment); tests hold the two
equal. The twin runs unless it is not built or ``BPETOK_PURE_PYTHON=1``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import compress
from typing import Any

from bpetok.compiled import compiled_module
from bpetok.vocab import TokenAttr, Vocabulary

SPECIAL = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN
HIDDEN_WITHOUT_SPECIAL = TokenAttr.CONTROL | TokenAttr.UNKNOWN  # cut only with parse_special
ASCII_SPACE = " \t\n\v\f\r"  # C isspace, what LSTRIP/RSTRIP remove
# The C twin numbers characters with 31 bits: longer texts take the reference.
_FAST_LONGEST_CHARS = 2**31 - 2
# Up to this many distinct first characters of the specials, a text holding none of them is
# passed whole without a scan for specials (most texts, for a chat vocabulary's "<|...|>" tokens).
_FIRST_CHARS_CHECKED = 8

Fragments = list[str | int]
Spans = Sequence[tuple[int, int]]


class SpecialTable:
    """The special tokens of ``vocabulary`` in llama.cpp's order, and :meth:`partition`.

    ``specials``: (id, text) longest UTF-8 text first, ties by id (llama.cpp's ``std::sort`` is
    unstable; this is the order it gives in practice). ``texts[parse_special]``: the texts cut in
    that mode, what the batch kernel checks texts for. ``finders[parse_special]``: a regex that
    matches any of them (None: no specials), compiled on first use.

    The table is held as flat lists of ids, texts and strip flags, not a tuple per special: a
    Gemma vocabulary's 6,000+ specials as tuples made the load pay for garbage collections
    (each one walking the vocabulary's young 262k-entry lists).
    """

    def __init__(self, vocabulary: Vocabulary):
        attrs, tokens = vocabulary.attrs, vocabulary.tokens
        # The few distinct attribute values are tested, not 151k TokenAttr members (enum.Flag.__and__).
        special_attrs = {a for a in set(attrs) if a & SPECIAL}
        # Sorted by one int each, longest text first then id (ids are below 2**32), not by tuples.
        keys = sorted(
            -len(tokens[token_id]) << 32 | token_id
            for token_id in compress(range(len(attrs)), map(special_attrs.__contains__, attrs))
        )
        ids: list[int] = []
        texts: list[str] = []
        for key in keys:
            token_id = key & 0xFFFFFFFF
            try:
                text = tokens[token_id].decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                continue  # cannot occur in a str
            if text:  # the loader renames empty tokens; an empty one would never end the cut loop
                ids.append(token_id)
                texts.append(text)
        # Per distinct attribute value, not per token: enum.Flag's & costs ~2 µs a call.
        strip_of = {a: _strip_of(a) for a in special_attrs}
        shown = {a for a in special_attrs if not a & HIDDEN_WITHOUT_SPECIAL}
        strips = [strip_of[attrs[token_id]] for token_id in ids]
        visible = [attrs[token_id] in shown for token_id in ids]
        # parse_special -> (ids, texts, strip flags) of the specials cut in that mode, in cutting order.
        self._columns: dict[bool, tuple[list[int], tuple[str, ...], list[int]]] = {
            True: (ids, tuple(texts), strips),
            False: (list(compress(ids, visible)), tuple(compress(texts, visible)), list(compress(strips, visible))),
        }
        self.texts: dict[bool, tuple[str, ...]] = {mode: columns[1] for mode, columns in self._columns.items()}
        firsts = {mode: tuple({text[0] for text in texts}) for mode, texts in self.texts.items()}
        # One regex search for any of them: a scan per character costs more (a space among them is found late).
        self._first_chars = {
            mode: re.compile("[" + "".join(map(re.escape, chars)) + "]") if 0 < len(chars) <= _FIRST_CHARS_CHECKED else None
            for mode, chars in firsts.items()
        }
        self.finders = _LazyFinders(self.texts)
        self._compiled = compiled_module("bpetok._specials")
        self._automata: dict[bool, Any] = {}

    @property
    def specials(self) -> list[tuple[int, str]]:
        """(id, text) of every special, in cutting order (built on each access)."""
        ids, texts, _ = self._columns[True]
        return list(zip(ids, texts))

    def entries(self, parse_special: bool) -> Iterator[tuple[int, str, int]]:
        """(id, text, strip flags) of the specials cut in that mode, in cutting order, as
        :func:`partition_reference` takes them."""
        ids, texts, strips = self._columns[parse_special]
        return zip(ids, texts, strips)

    def automata(self) -> tuple[Any, Any] | None:
        """The C automata of parse_special False and True (None for a mode without specials),
        built now; None when the C twin does not run."""
        if self._compiled is None:
            return None
        return (self._automaton(False), self._automaton(True))

    def _automaton(self, parse_special: bool) -> Any:
        """The C automaton of that mode (None: no specials), built on first use; the C twin runs."""
        automaton = self._automata.get(parse_special)
        if automaton is None and self.texts[parse_special] and self._compiled is not None:
            ids, texts, strips = self._columns[parse_special]
            encoded = [text.encode("utf-8", "surrogatepass") for text in texts]
            automaton = self._automata[parse_special] = self._compiled.Automaton(encoded, ids, strips)
        return automaton

    @property
    def engine(self) -> str:
        """``"C"`` when the Aho-Corasick twin cuts texts, else ``"pure Python"``."""
        return "C" if self._compiled is not None else "pure Python"

    def partition(self, text: str, parse_special: bool, protected: Spans | None = None) -> Fragments:
        """Cut the special tokens out of ``text``: str fragments to pre-tokenize, ints already ids.

        ``protected``: (start, end) spans of ``text`` that no special token may overlap (a chat's
        message text, see bpetok.apps.chat): a match there stays plain text.
        """
        if not self.texts[parse_special] or not text:
            return [text]
        firsts = self._first_chars[parse_special]
        if firsts is not None and not firsts.search(text):
            return [text]
        spans = _normalized(protected, len(text)) if protected else []
        if self._compiled is None or len(text) > _FAST_LONGEST_CHARS:
            return partition_reference(text, self.entries(parse_special), spans, self.finders[parse_special])
        return self._automaton(parse_special).partition(text, spans)

    def partition_reference(self, text: str, parse_special: bool, protected: Spans | None = None) -> Fragments:
        """:meth:`partition` by the per-special reference algorithm, whichever engine runs."""
        if not self.texts[parse_special] or not text:
            return [text]
        spans = _normalized(protected, len(text)) if protected else []
        return partition_reference(text, self.entries(parse_special), spans, self.finders[parse_special])


def partition_reference(
    text: str, entries: Iterable[tuple[int, str, int]], protected: Spans, finder: re.Pattern | None = None
) -> Fragments:
    """llama.cpp's ``tokenizer_st_partition``, one special at a time.

    ``entries``: (id, text, strip) in cutting order, strip holding :data:`LSTRIP` / :data:`RSTRIP`;
    ``protected``: sorted, disjoint, non-empty spans no match may overlap; ``finder``: a regex of all
    the texts, one scan that tells a text without any apart (0.2 s on 4 MB for 50,000 specials,
    where one ``special in text`` each is minutes).

    Raw fragments are held as (start, end) offsets into ``text`` and sliced once at the end:
    copying the rest of the fragment at every match made ``"<|im_end|>" * n`` quadratic.
    """
    if finder is not None and finder.search(text) is None:
        return [text]
    find = text.find if not protected else _find_outside(text, protected)
    fragments: list[tuple[int, int] | int] = [(0, len(text))]
    for token_id, special, strip in entries:
        if special not in text:  # one scan in C, instead of one call per fragment
            continue
        lstrip, rstrip, size = strip & LSTRIP, strip & RSTRIP, len(special)
        out: list[tuple[int, int] | int] = []
        for fragment in fragments:
            if fragment.__class__ is int:
                out.append(fragment)
                continue
            start, end = fragment  # type: ignore[misc]
            at = find(special, start, end)
            if at < 0:
                out.append(fragment)
                continue
            while True:
                left_end = at
                if lstrip:  # llama.cpp strips C isspace() to the left of the match, within the fragment
                    while left_end > start and text[left_end - 1] in ASCII_SPACE:
                        left_end -= 1
                if left_end > start:
                    out.append((start, left_end))
                out.append(token_id)
                start = at + size
                if rstrip:
                    while start < end and text[start] in ASCII_SPACE:
                        start += 1
                if start >= end:
                    break
                at = find(special, start, end)
                if at < 0:
                    out.append((start, end))
                    break
        fragments = out
    return [f if f.__class__ is int else text[f[0] : f[1]] for f in fragments]  # type: ignore[index]


LSTRIP, RSTRIP = 1, 2  # the strip flags of an entry (the C module takes the same)


def _strip_of(attr: int) -> int:
    return (LSTRIP if attr & TokenAttr.LSTRIP else 0) | (RSTRIP if attr & TokenAttr.RSTRIP else 0)


def _normalized(protected: Spans, length: int) -> list[tuple[int, int]]:
    """``protected`` clipped to the text, empty spans dropped, sorted, overlapping ones merged."""
    spans: list[tuple[int, int]] = []
    for start, end in sorted((max(0, int(s)), min(length, int(e))) for s, e in protected):
        if start >= end:
            continue
        if spans and start <= spans[-1][1]:
            if end > spans[-1][1]:
                spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
    return spans


def _find_outside(text: str, protected: Spans) -> Callable[[str, int, int], int]:
    """``text.find`` that skips matches overlapping a protected span."""
    starts = [start for start, _ in protected]

    def find(needle: str, start: int, end: int) -> int:
        at = text.find(needle, start, end)
        while at >= 0:
            i = bisect_right(starts, at + len(needle) - 1) - 1  # the last span starting inside the match
            if i < 0 or protected[i][1] <= at:
                return at
            at = text.find(needle, at + 1, end)
        return at

    return find


class _LazyFinders(Mapping):
    """parse_special -> a regex matching any special text of that mode (or None), compiled when
    first asked for: with 50,000 specials compiling it would be most of the load."""

    def __init__(self, texts: dict[bool, tuple[str, ...]]):
        self._texts = texts
        self._compiled: dict[bool, re.Pattern | None] = {}

    def __getitem__(self, parse_special: bool) -> re.Pattern | None:
        key = bool(parse_special)
        if key not in self._compiled:
            texts = self._texts[key]
            self._compiled[key] = (
                re.compile("|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True))) if texts else None
            )
        return self._compiled[key]

    def __iter__(self) -> Iterator[bool]:
        return iter((False, True))

    def __len__(self) -> int:
        return 2

