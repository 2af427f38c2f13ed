"""Pre-tokenizers: split text into the pieces BPE works on, as llama.cpp does.

A pre-tokenizer is any object with ``split(text) -> list[str]`` whose pieces concatenate back to
``text``. Plugins register them with a :class:`PreTokenizerSpec` through the
``bpetok_register_pretokenizers`` hook. The built-in ones (``qwen2``, ``smollm``) run one regular
expression over llama.cpp's "collapsed" text (see :func:`collapse`), which gives llama.cpp's
Unicode 15.1 classes whatever Unicode version Python or ``regex`` carry.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from bpetok.pretok.unicode_data import RANGE_CLASSES, RANGE_STARTS, WHITESPACE

if TYPE_CHECKING:
    from bpetok.vocab import Vocabulary

__all__ = [
    "PreTokenizer",
    "PreTokenizerSpec",
    "CollapsedRegexPreTokenizer",
    "kernel_split_spec",
    "RegexChainPreTokenizer",
    "Splitter",
    "collapse",
    "translate",
]


class PreTokenizer(Protocol):
    """What the engine calls: ``split``. Whether the engine may cut text at spaces first (its
    fast path) is declared on the spec (:attr:`PreTokenizerSpec.space_chunks`)."""

    def split(self, text: str) -> list[str]:
        """Return the pieces of ``text``, in order; they concatenate to ``text``."""


@dataclass(frozen=True)
class PreTokenizerSpec:
    """What a plugin registers: a pre-tokenizer and the llama.cpp flags that go with it.

    ``pre_names`` are the ``tokenizer.ggml.pre`` values it handles for ``model``; each
    (model, pre) pair is one registry key (``""`` is a file with no ``pre`` key). The flags
    mirror llama.cpp's per-pre-type settings (``llama_vocab::impl::load``):

    - ``clean_spaces``: the detokenizer removes a space before ``?!.,`` and around ``'``.
    - ``ignore_merges``: a piece that is already a token is emitted whole, without BPE.
    - ``add_bos``: the default of ``tokenizer.ggml.add_bos_token`` when the file has no such key.
    - ``add_sep``: the default of ``tokenizer.ggml.add_sep_token`` (llama.cpp reports it to
      embedding callers; tokenizing never adds a SEP for a BPE vocabulary).
    - ``bos_default``: False where llama.cpp has no default BOS id (GLM-4), so a file without
      ``tokenizer.ggml.bos_token_id`` has no BOS.
    - ``space_chunks``: a promise that a space whose preceding character is not whitespace
      (``not c.isspace()``) always starts a piece, and that the pieces from there on do not depend
      on the text before it. The engine then cuts text at such spaces and caches each chunk's
      ids (``" word,"``), which makes most of a text dictionary lookups. tests/test_fast.py
      checks the promise for every registered spec.
    - ``llama_type``: llama.cpp's name for the type (``LLAMA_VOCAB_PRE_TYPE_<llama_type>``).
    - ``byte_encode``: False where llama.cpp runs BPE over the raw UTF-8 of the pieces instead of
      GPT-2's byte alphabet (its ``llm_tokenizer_bpe::byte_encode``): every character is a symbol,
      a symbol that is no token falls back to ``<0xXX>`` tokens. The gpt2 model then builds its
      raw-UTF-8 variant (:mod:`bpetok.models.raw_utf8`), which takes whole fragments.
    - ``escape_whitespaces``: spaces become ``▁`` (U+2581) before the split, and back in a NORMAL
      token's piece; without it a raw-UTF-8 token's piece is read through GPT-2's alphabet, as
      llama.cpp's ``token_to_piece`` does.
    - ``newline_runs_whole``: a piece of newlines only that is a token is emitted whole.
    - ``metaspace_words``: each piece that is not newlines only starts with ``▁`` (added if
      missing) and is cut again before every further ``▁`` (llama.cpp's mmbert words).
    - ``kernel_split``: the name of a splitter compiled into the C kernel (``bpetok/pretok/_split.c``,
      listed in ``bpetok.models.gpt2._kernel.SPLITTERS``) that splits exactly as this pre-tokenizer does.
      With the kernel built, the engine then hands whole texts to the kernel (text -> space chunks
      -> pieces -> ids, no Python object per piece); the pre-tokenizer's ``split`` stays the readable
      twin that tests/test_split.py holds it equal to. A name the kernel lacks: the Python path runs.

    ``for_vocabulary``, when set, builds the pre-tokenizer from the loaded vocabulary instead of
    ``factory()``: for a pre name that stands for pre-tokenizers the file itself describes (a
    tokenizer.json's own Split regex, read by its loader into ``vocabulary.metadata``).
    ``factory()`` must still give a usable default for listings and tests.
    """

    name: str
    pre_names: tuple[str, ...]
    factory: Callable[[], PreTokenizer]
    model: str = "gpt2"
    clean_spaces: bool = True
    ignore_merges: bool = False
    add_bos: bool = False
    add_sep: bool = False
    bos_default: bool = True
    space_chunks: bool = False
    llama_type: str = ""
    byte_encode: bool = True
    escape_whitespaces: bool = False
    newline_runs_whole: bool = False
    metaspace_words: bool = False
    kernel_split: str = ""
    description: str = ""
    for_vocabulary: Callable[[Vocabulary], PreTokenizer] | None = None
    # Filled in by the registry: which plugin registered this spec.
    plugin: str = field(default="", compare=False)


# -- llama.cpp's collapsed text ------------------------------------------------------------------
# llama.cpp (src/unicode.cpp, unicode_regex_split) maps every non-ASCII codepoint to one
# placeholder byte for its class and runs an ASCII regex over the result. We do the same, one
# character for one (str.translate on short texts, a numpy table on long ones: two forms of one
# mapping, held together by tests/test_collapse.py), so match offsets in the collapsed text are
# offsets in the original text. Every placeholder is non-ASCII, so a piece of collapsed text is
# ASCII exactly where the text is.

OTHER, NUMBER, LETTER, PUNCTUATION, MARK, SYMBOL = "\xd0", "\xd1", "\xd2", "\xd3", "\xd4", "\xd5"
NON_ASCII_WHITESPACE = "\xd6"


class _ClassTable(dict):
    """codepoint -> class character, filled lazily (str.translate asks only for what it meets)."""

    def __missing__(self, codepoint: int) -> str:
        if codepoint < 128:
            value = chr(codepoint)
        elif codepoint in WHITESPACE:
            value = NON_ASCII_WHITESPACE
        else:
            value = chr(RANGE_CLASSES[bisect.bisect_right(RANGE_STARTS, codepoint) - 1])
        self[codepoint] = value
        return value


_CLASS_TABLE = _ClassTable()
_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")
# From this many characters on, collapse through a numpy table of every codepoint's class.
_ARRAY_COLLAPSE_MIN = 4096


def _collapse_run(match: re.Match) -> str:
    return match.group().translate(_CLASS_TABLE)


def collapse(text: str) -> str:
    """Map each codepoint to llama.cpp's class placeholder; ASCII stays as it is.

    Short texts: only the non-ASCII runs go through ``str.translate`` (a dictionary lookup per
    character, 3-4x faster than translating all of it on mostly-ASCII text). Long texts: one
    numpy lookup per codepoint, another 4-15x faster (:func:`_collapse_array`).

    >>> collapse("é1 ٣\u3000x")
    '\\xd21 \\xd1\\xd6x'
    """
    if text.isascii():
        return text
    if len(text) >= _ARRAY_COLLAPSE_MIN:
        return _collapse_array(text)
    return _NON_ASCII_RUN.sub(_collapse_run, text)


@functools.cache
def _codepoint_classes():
    """Every codepoint's placeholder byte, as a numpy array of 0x110000 bytes (built on first use)."""
    import numpy as np

    starts = np.array(RANGE_STARTS, np.int64)
    table = np.repeat(np.frombuffer(RANGE_CLASSES, np.uint8), np.diff(np.append(starts, 0x110000)))
    table[:128] = np.arange(128)
    table[[c for c in WHITESPACE if c >= 128]] = ord(NON_ASCII_WHITESPACE)
    return table


def _collapse_array(text: str) -> str:
    """:func:`collapse` through :func:`_codepoint_classes` (lone surrogates included)."""
    import numpy as np

    codepoints = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    return _codepoint_classes()[codepoints].tobytes().decode("latin-1")


# Character-class bodies over collapsed text, for use inside [...].
CLASS_BODIES: dict[str, str] = {
    "L": "A-Za-z" + LETTER,
    "N": "0-9" + NUMBER,
    "P": r"!-#%-*,-/:-;?-@\[-\]_{}" + PUNCTUATION,
    "M": MARK,
    "S": r"$+<->^`|~" + SYMBOL,
    # llama.cpp's whitespace: ASCII \t..\r and space; non-ASCII whitespace collapses to \xd6.
    "s": "\t-\r " + NON_ASCII_WHITESPACE,
}
# llama.cpp collapses every letter to one placeholder, so its letter subclasses are all \p{L}.
for _sub in ("Lu", "Ll", "Lt", "Lm", "Lo"):
    CLASS_BODIES[_sub] = CLASS_BODIES["L"]


# The class names llama.cpp's unicode_regex_split recognises (k_ucat_enum); naming any of them
# sends a pattern to the collapsed text. The letter subclasses collapse to \p{L}: llama.cpp has
# one placeholder for every letter.
LLAMA_CLASSES = ("N", "L", "P", "M", "S", "Lu", "Ll", "Lt", "Lm", "Lo")
# What ECMAScript's \s is over each view: ASCII whitespace, and the placeholder non-ASCII
# whitespace became (collapsed text: U+00D6; codepoints: U+000B, which is already in \t-\r).
_SPACE_BODY = {"collapsed": CLASS_BODIES["s"], "codepoints": "\t-\r "}
_TOKEN = re.compile(r"\\p\{(\w+)\}|\\.|.", re.S)


def translate(pattern: str, view: str = "collapsed", extra_classes: dict[str, str] | None = None) -> str:
    r"""An ECMAScript pattern as llama.cpp writes it -> a Python ``re`` pattern over ``view``:
    ``"collapsed"`` text (:func:`collapse`), or ``"codepoints"`` (see :mod:`bpetok.pretok.chain`).

    ``\p{..}``, ``\s``, ``\d`` and ``\w`` become their bodies over the view (inside a bracket
    expression) or a bracket of their own; ``$``, ``.`` and groups keep ECMAScript's meaning.
    ``extra_classes`` adds class bodies (``{"Han": "\xd7\xd8"}``) for a view that has
    placeholders of its own.

    >>> translate(r"[^\s\p{L}]+$", "collapsed") == "[^\t-\r \xd6A-Za-z\xd2]+\\Z"
    True
    """
    classes = {name: CLASS_BODIES[name[0]] for name in LLAMA_CLASSES}
    classes.update(extra_classes or {})
    space = _SPACE_BODY.get(view, _SPACE_BODY["collapsed"])
    bodies = {"\\s": space, "\\d": "0-9", "\\w": "A-Za-z0-9_"}
    out, in_bracket = [], False
    for m in _TOKEN.finditer(pattern):
        token = m.group()
        if m.group(1) is not None:
            if m.group(1) not in classes:
                raise ValueError(f"class \\p{{{m.group(1)}}} is not one llama.cpp knows: {pattern!r}")
            body = classes[m.group(1)]
            out.append(body if in_bracket else f"[{body}]")
        elif token in bodies:
            out.append(bodies[token] if in_bracket else f"[{bodies[token]}]")
        elif token in ("\\S", "\\D", "\\W"):
            if in_bracket:
                raise ValueError(f"{token} inside a bracket expression is not supported: {pattern!r}")
            out.append(f"[^{bodies[token.lower()]}]")
        elif in_bracket:
            in_bracket = token != "]"
            out.append(token)
        elif token == "[":
            in_bracket = True
            out.append(token)
        elif token == "$":  # ECMAScript's $ is the end only; Python's also matches before a final \n
            out.append(r"\Z")
        elif token == ".":  # ECMAScript's dot stops at every line terminator
            out.append("[^\n\r\u2028\u2029]")
        elif token == "(" and not pattern.startswith("?", m.end()):
            out.append("(?:")  # llama.cpp compiles with nosubs: groups only group (and findall wants none)
        elif token == "^":
            raise ValueError(f"^ is not supported (no llama.cpp pattern uses it): {pattern!r}")
        else:
            out.append(token)
    return "".join(out)


class CollapsedRegexPreTokenizer:
    """Split with one regex run over collapsed text, the way llama.cpp's splitters see text.

    The pattern is written as llama.cpp writes it, ``\\p{..}`` classes included (see
    :func:`translate`); every match becomes a piece. The pattern must match every position (end with a catch-all), so the
    pieces cover the text. ``space_chunks=True`` declares the :class:`PreTokenizer` promise of
    that name for the pattern (the engine then caches whole space-separated chunks).
    """

    def __init__(self, pattern: str, *, space_chunks: bool = False):
        self.pattern = pattern
        self.regex = re.compile(translate(pattern))
        self.space_chunks = space_chunks

    @classmethod
    def from_compiled(cls, regex: re.Pattern) -> "CollapsedRegexPreTokenizer":
        """One over an already compiled pattern for collapsed text (see :mod:`bpetok.pretok.chain`)."""
        self = cls.__new__(cls)
        self.pattern, self.regex, self.space_chunks = regex.pattern, regex, False
        return self

    def split(self, text: str) -> list[str]:
        pieces = self.regex.findall(collapse(text))
        if text.isascii():
            return pieces
        # Collapsed pieces are the text's wherever they are ASCII; cut the others from the text
        # (cheaper than finditer's match objects for every piece). list.index finds each one
        # and the lengths of the ASCII pieces before it give its offset, both in C.
        is_ascii = list(map(str.isascii, pieces))
        at = done = 0
        i = -1
        with contextlib.suppress(ValueError):  # no non-ASCII piece left
            while True:
                i = is_ascii.index(False, i + 1)
                at += sum(map(len, pieces[done:i]))
                end = at + len(pieces[i])
                pieces[i] = text[at:end]
                at, done = end, i + 1
        return pieces


def kernel_split_spec(
    name: str, pre_names: tuple[str, ...], factory: Callable[[], PreTokenizer], llama_type: str, **flags
) -> PreTokenizerSpec:
    """The spec of a pre-tokenizer that the C kernel also splits, under the same ``name``
    (``kernel_split``), and that may be cut at spaces (``space_chunks``: the pattern lets a space
    after a non-space only start a piece, and nothing looks behind it). ``flags`` are the spec's
    other fields (``clean_spaces``, ``description``...).

    >>> spec = kernel_split_spec("qwen2", ("qwen2",), lambda: None, "QWEN2", clean_spaces=False)
    >>> spec.kernel_split, spec.space_chunks, spec.clean_spaces
    ('qwen2', True, False)
    """
    return PreTokenizerSpec(
        name=name, pre_names=pre_names, factory=factory, llama_type=llama_type, space_chunks=True, kernel_split=name,
        **flags,
    )

# The regex-chain mechanism lives in its own module; it builds on the collapsed text above.
from bpetok.pretok.chain import RegexChainPreTokenizer, Splitter  # noqa: E402
