"""The regex chain: llama.cpp's way of running a pre-tokenizer's list of regular expressions.

llama.cpp (``unicode_regex_split`` in src/unicode.cpp) splits text with a list of passes. The
first pass sees the whole text; every later pass runs inside each piece the previous one left,
never across a piece's edge. Within a piece, each match becomes a piece and so does the text
between two matches (nothing is dropped), and lookaheads and ``$`` see the piece's end as the end
of the text. A family of pre-tokenizers is then just its list of passes::

    RegexChainPreTokenizer([
        r"\\p{N}{1,3}",                        # number runs of up to three, cut first
        r"[一-龥぀-ゟ゠-ヿ]+",                    # then CJK runs, inside what is left
        r"[!-/][A-Za-z]+|...|\\s+(?!\\S)|\\s+",  # then the word pattern, inside each piece
    ])

Each pass is written exactly as llama.cpp's ``llm_tokenizer_bpe`` writes it (ECMAScript syntax),
and runs as llama.cpp runs it:

- a pattern naming a ``\\p{..}`` class runs over llama.cpp's *collapsed* text (every non-ASCII
  codepoint replaced by a placeholder for its class: :func:`bpetok.pretok.collapse`), so
  ``\\p{L}`` is ``[A-Za-z]`` plus the letter placeholder, and ``\\p{Lu}``, ``\\p{Ll}``... are
  all of ``\\p{L}``, because llama.cpp collapses them so;
- any other pattern runs over the codepoints themselves (llama.cpp's ``std::wregex``), with
  non-ASCII whitespace seen as U+000B and ``\\s``, ``\\d``, ``\\w`` meaning their ASCII sets;
- a pass may instead be a :class:`Splitter`, for the few splitters llama.cpp writes by hand
  where no regex says the same (``kimi-k2``, the ``afmoe`` digit grouping).

The chain costs one Python loop per piece per pass; a family whose chain is one collapsed regex
(qwen2, llama3, gpt-4o...) runs it over the whole text in one call instead (the fast path).
"""

from __future__ import annotations

import functools
import re
from typing import Callable, Sequence, Union

from bpetok.pretok import (
    LLAMA_CLASSES,
    CollapsedRegexPreTokenizer,
    collapse,
    translate,
)
from bpetok.pretok.unicode_data import WHITESPACE

__all__ = [
    "RegexChainPreTokenizer", "RegexPass", "Splitter", "chain_spec", "register_view", "translate", "uses_classes",
]

View = str  # "collapsed" or "codepoints", or a Splitter's own view name


def uses_classes(pattern: str) -> bool:
    """Whether llama.cpp runs ``pattern`` over collapsed text (it names one of its classes)."""
    return any(f"\\p{{{name}}}" in pattern for name in LLAMA_CLASSES)


# -- views: the text as each kind of pass sees it, one character for one -----------------------

_NON_ASCII_SPACE_TO_VT = {c: "\x0b" for c in WHITESPACE if c >= 128}


def codepoint_view(text: str) -> str:
    """The text as llama.cpp's ``std::wregex`` passes see it: non-ASCII whitespace is U+000B."""
    return text if text.isascii() else text.translate(_NON_ASCII_SPACE_TO_VT)


_VIEWS: dict[str, Callable[[str], str]] = {"collapsed": collapse, "codepoints": codepoint_view}


def register_view(name: str, make: Callable[[str], str]) -> None:
    """Add a view (a one-character-for-one rewrite of the text) that splitters can ask for."""
    _VIEWS[name] = make


class _Views(dict):
    """The views of one text, each made on first use."""

    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def __missing__(self, name: str) -> str:
        value = self[name] = _VIEWS[name](self.text)
        return value


# -- passes ------------------------------------------------------------------------------------


class Splitter:
    """A hand-written pass: ``cut(view, start, end, ends)`` appends to ``ends`` the end offset of
    every piece it makes of ``view[start:end]`` (the last one is ``end``).

    ``view`` names which rewrite of the text it reads (``"collapsed"``, ``"codepoints"`` or one
    added with :func:`register_view`).
    """

    view: View = "collapsed"

    def cut(self, view: str, start: int, end: int, ends: list[int]) -> None:  # pragma: no cover
        raise NotImplementedError


class RegexPass(Splitter):
    """One llama.cpp regex: matches and the text between them become pieces."""

    def __init__(self, pattern: str, *, view: View | None = None, extra_classes: dict[str, str] | None = None):
        self.pattern = pattern
        self.view = view or ("collapsed" if uses_classes(pattern) else "codepoints")
        self.regex = re.compile(translate(pattern, self.view, extra_classes), re.ASCII)

    def cut(self, view: str, start: int, end: int, ends: list[int]) -> None:
        done = start
        # endpos makes lookaheads and \Z stop at the piece's edge, as llama.cpp's iterator does.
        for m in self.regex.finditer(view, start, end):
            a, b = m.span()
            if a > done:
                ends.append(a)  # the text between two matches is a piece too
            if b > a:
                ends.append(b)  # an empty match only cuts (llama.cpp's empty pieces give no ids)
            done = b
        if done < end:
            ends.append(end)

    def __repr__(self) -> str:
        return f"RegexPass({self.pattern!r})"


Pass = Union[str, Splitter]


class RegexChainPreTokenizer:
    """A pre-tokenizer made of llama.cpp passes (see the module docstring).

    Instances keep no state between calls: one may serve many tokenizers (:func:`chain_spec`
    shares one per list of passes).

    >>> gpt2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
    >>> RegexChainPreTokenizer([r"\\p{N}", gpt2]).split("it's 42!")
    ['it', "'s", ' ', '4', '2', '!']
    """

    def __init__(self, passes: Sequence[Pass]):
        if not passes:
            raise ValueError("a regex chain needs at least one pass")
        self.passes: tuple[Splitter, ...] = tuple(RegexPass(p) if isinstance(p, str) else p for p in passes)
        first = self.passes[0]
        # One collapsed regex over the whole text: findall in one call. findall drops the text
        # between matches, which the chain keeps as pieces, so split checks that the pieces
        # cover the text (patterns ending in a catch-all such as \s+ always do).
        self._single = (
            CollapsedRegexPreTokenizer.from_compiled(first.regex)
            if len(self.passes) == 1 and isinstance(first, RegexPass) and first.view == "collapsed"
            else None
        )

    def split(self, text: str) -> list[str]:
        if not text:
            return []
        if self._single is not None:
            pieces = self._single.split(text)
            if sum(map(len, pieces)) == len(text):
                return pieces
            # Some text matched nothing: fall through to the chain, which keeps it as pieces.
        views = _Views(text)
        ends = [len(text)]
        for step in self.passes:
            view = views[step.view]
            cut = step.cut
            new: list[int] = []
            start = 0
            for end in ends:
                cut(view, start, end, new)
                start = end
            ends = new
        pieces, start = [], 0
        for end in ends:
            pieces.append(text[start:end])
            start = end
        return pieces

    def __repr__(self) -> str:
        return f"RegexChainPreTokenizer({list(self.passes)!r})"


@functools.lru_cache(maxsize=None)
def _shared_chain(passes: tuple[Pass, ...]) -> RegexChainPreTokenizer:
    return RegexChainPreTokenizer(passes)


def chain_spec(name: str, llama_type: str, pre_names: Sequence[str], passes: Sequence[Pass], **flags):
    """A :class:`~bpetok.pretok.PreTokenizerSpec` whose pre-tokenizer is the chain of ``passes``.

    ``flags`` are the spec's llama.cpp flags (``clean_spaces``, ``ignore_merges``...).

    >>> spec = chain_spec("gpt2", "MPT", ["mpt"], [r"\\p{L}+"], space_chunks=True)
    >>> spec.factory().split("ab cd")
    ['ab', ' ', 'cd']
    """
    from bpetok.pretok import PreTokenizerSpec

    return PreTokenizerSpec(
        name=name,
        pre_names=tuple(pre_names),
        factory=functools.partial(_shared_chain, tuple(passes)),
        llama_type=llama_type,
        **flags,
    )
