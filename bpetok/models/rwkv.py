"""RWKV's World tokenizer, llama.cpp's ``rwkv`` model (src/llama-vocab.cpp, ``llm_tokenizer_rwkv``).

The file stores each token's bytes as Python's ``repr`` writes them (``\\x00``, ``\\n``, ``\\'``);
llama.cpp reads them back with ``llama_unescape_rwkv_token`` and tokenizes each fragment of text
between special tokens by greedy longest match over a byte trie of those bytes:

- at each position the longest token that the bytes there start with is emitted;
- a byte that starts no token gives the unknown token and one byte is skipped.

A token's piece is its unescaped bytes, whatever its type ([PADn] included); llama.cpp adds no
BOS or EOS and cleans no spaces for this model.

:meth:`RwkvModel.encode_reference` is llama.cpp's walk, a byte at a time, and the readable twin
of two fast paths: ``bpetok/models/_trie.c`` walks a flattened copy of the trie in C; without it
(pure-Python engine) the trie is compiled into one regular expression whose alternatives try the
longer token first, so ``re.findall`` does the walk in C, with a cache of space chunks. The regex
is exact only when every byte is a token (then a match exists at every position); otherwise the
readable walk runs.
"""

from __future__ import annotations

import functools
import re
from array import array
from functools import cached_property

from bpetok.compiled import compiled_module, warn_not_built
from bpetok.errors import InputError, VocabularyError
from bpetok.hookspecs import hookimpl
from bpetok.models import ModelSpec
from bpetok.models.base import CachingModel

__all__ = ["RwkvModel", "unescape_rwkv_token"]

# What llama_unescape_rwkv_token reads as intended: a backslash before t, n, r, x + two lower-case
# hex digits (its only hex digits), or before any other character, which stands for itself.
_VALID = re.compile(rb"(?:[^\\]|\\x[0-9a-f]{2}|\\[^x])*", re.S)
_ESCAPE = re.compile(rb"\\(x[0-9a-f]{2}|.)", re.S)
_NAMED = {b"t": b"\t", b"n": b"\n", b"r": b"\r"}
# Beyond this trie depth the regex nests too deep for Python's regex parser: the walk runs.
_REGEX_DEPTH = 256


def _unescape_one(match: re.Match) -> bytes:
    code = match.group(1)
    if code[:1] == b"x":
        return bytes((int(code[1:], 16),))
    return _NAMED.get(code, code)


def unescape_rwkv_token(text: bytes) -> bytes | None:
    """A token's bytes as llama.cpp's ``llama_unescape_rwkv_token`` reads them, or None when the
    text is no valid escape (a trailing backslash, ``\\x`` without two lower-case hex digits).

    >>> unescape_rwkv_token(b"\\\\x41\\\\n\\\\'"), unescape_rwkv_token(b"a\\\\")
    (b"A\\n'", None)
    """
    if b"\\" not in text:
        return text
    if _VALID.fullmatch(text) is None:
        return None
    return _ESCAPE.sub(_unescape_one, text)


class RwkvModel(CachingModel):
    """Greedy longest match over the unescaped tokens' bytes (see the module docstring)."""

    # llama.cpp's rwkv branch of tokenize adds neither, whatever tokenizer.ggml.add_*_token say.
    may_add_bos = False
    may_add_eos = False

    def __init__(self, vocabulary, pretokenizer=None):
        self.path = vocabulary.path
        texts = []
        for token_id, text in enumerate(vocabulary.tokens):
            raw = unescape_rwkv_token(text)
            if raw is None:
                raise VocabularyError(
                    f"{vocabulary.path}: token {token_id} {text!r} is not a valid RWKV escaped byte string "
                    "(a backslash must be followed by a character, \\x by two lower-case hex digits); "
                    "llama.cpp would read garbage bytes for it: re-convert the vocabulary"
                )
            texts.append(raw)
        self.token_texts = texts
        # A text that two tokens share maps to the later one, as llama.cpp's trie insert overwrites.
        self.ids: dict[bytes, int] = {text: i for i, text in enumerate(texts) if text}
        self.unk = vocabulary.special_ids.get("unk")
        module = compiled_module("bpetok.models._trie")
        if module is None:
            warn_not_built("bpetok.models._trie")
        self._walker = None
        if module is not None:
            try:
                # Flattened and let go: the C walk needs only its copy, and the dict trie (~100k
                # dicts) would cost tens of MB and every full garbage collection a walk over it.
                self._walker = module.Trie(*_flatten(self._build_trie()))
            except OverflowError:  # a trie past the double array's 4M slots: the walk runs in Python
                self._walker = None
        self.compiled = self._walker is not None  # the C walk (bpetok/models/_trie.c)
        # The pure-Python engine's fast path, built at load (~0.6 s: not the first text's).
        self._pattern = self._build_pattern() if self._walker is None else None

    @cached_property
    def _trie(self) -> dict:
        """The byte trie as nested dicts (key -1: the token ending there), built when first read:
        by the readable walk and the pure-Python engine's regex, not by the C walk."""
        return self._build_trie()

    def _build_trie(self) -> dict:
        root: dict = {}
        for text, token_id in self.ids.items():
            node = root
            for b in text:
                node = node.setdefault(b, {})
            node[-1] = token_id  # key -1: the token ending here
        return root

    def _build_pattern(self) -> re.Pattern | None:
        """The trie as one regex, or None where it would not be exact or would nest too deep."""
        if not all(b in self._trie and -1 in self._trie[b] for b in range(256)):
            return None
        if max(map(len, self.ids), default=0) > _REGEX_DEPTH:
            return None
        try:
            return re.compile(_trie_regex(self._trie, top=True), re.S)
        except (RecursionError, re.error, OverflowError):
            return None

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        """Ids of one fragment of text between special tokens."""
        walker = self._walker
        if walker is not None:  # the C walk over the str's UTF-8 (an ASCII str's own bytes)
            found = walker.encode_text(text, -1 if self.unk is None else self.unk)
            if found is not None:
                return found
        return self.encode_fragment_bytes(text.encode("utf-8", "surrogatepass"), at_start)

    text_encoder_gives_bytes = True  # encode_cut's as_bytes

    def text_encoder(self, automata):
        """Where the C walk runs: its ``encode_cut``, which takes the special tokens' cuts from
        the automaton (``Automaton.cuts``) and walks each fragment in the text's own UTF-8, as
        the Tokenizer's partition and :meth:`encode_fragment` would (a subclass with its own
        :meth:`encode_fragment` is left to those)."""
        built = self._own_automata(automata, RwkvModel) if self._walker is not None else None
        if built is None:
            return None
        return functools.partial(self._walker.encode_cut, -1 if self.unk is None else self.unk, *built)

    def encode_fragment_bytes(self, data: bytes, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` of raw bytes: llama.cpp matches bytes, valid UTF-8 or not.

        The bytes are cut before each space that no token holds after the byte before it: no
        token crosses such a cut, so the longest match restarts there, and each chunk's ids are
        cached by its bytes."""
        walker = self._walker
        if walker is not None:  # the C walk: faster than any cache
            found = walker.encode(data, -1 if self.unk is None else self.unk)
            return found if found is not None else self.encode_reference(data)  # the twin says why
        pattern = self._pattern
        if pattern is None:
            return self.encode_reference(data)
        findall, ids, cache = pattern.findall, self.ids.__getitem__, self._cache
        out: list[int] = []
        for chunk in self._space_cut.split(data):
            found = cache.get(chunk)
            if found is None:
                found = list(map(ids, findall(chunk)))
                cache.keep(chunk, found)
            out += found
        return out

    @cached_property
    def _space_cut(self) -> re.Pattern:
        """Matches where chunks are cut: before each space after a byte no token has a space after."""
        before = re.compile(rb"(.)(?= )", re.S)
        before_space = {b[0] for text in self.ids if b" " in text for b in before.findall(text)}
        if len(before_space) == 256:
            return re.compile(rb"(?!)")  # never: every byte is followed by a space in some token
        others = b"".join(re.escape(bytes((b,))) for b in sorted(before_space))
        return re.compile(rb"(?<=[^" + others + rb"])(?= )" if others else rb"(?<=.)(?= )", re.S)

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` by :meth:`encode_reference`."""
        return self.encode_reference(text.encode("utf-8", "surrogatepass"))

    def encode_reference(self, data: bytes) -> list[int]:
        """llama.cpp's ``llm_tokenizer_rwkv_session::tokenize``, a byte at a time."""
        out: list[int] = []
        position, n, root = 0, len(data), self._trie
        while position < n:
            node = root.get(data[position])
            if node is None:
                out.append(self._unknown(data, position))
                position += 1
                continue
            token_id, end = None, 0
            while node is not None:
                if -1 in node:
                    token_id, end = node[-1], position + 1
                if position + 1 >= n:
                    break
                position += 1
                node = node.get(data[position])
            if token_id is None:
                # llama.cpp emits id 0 and restarts at offset 0 here: it never ends.
                raise InputError(
                    f"input {data[:200]!r}: no token matches at offset {position}, though tokens start with "
                    "its bytes; llama.cpp loops forever on it with this vocabulary, so it has no token ids"
                )
            out.append(token_id)
            position = end
        return out

    def _unknown(self, data: bytes, position: int) -> int:
        if self.unk is None:
            raise InputError(
                f"{self.path}: byte {data[position]:#04x} at offset {position} starts no token and the "
                "vocabulary has no unknown token (llama.cpp emits the invalid id -1 for it): set "
                "tokenizer.ggml.unknown_token_id or remove the byte"
            )
        return self.unk

    def render_piece(self, token_id: int, text: bytes, attr: int) -> bytes | None:
        """Every token's piece is its unescaped bytes (llama.cpp's token_to_piece for RWKV)."""
        return self.token_texts[token_id]

    def normal_piece(self, text: bytes) -> bytes:
        """A NORMAL token's bytes: its text unescaped."""
        return unescape_rwkv_token(text) or b""


def _trie_regex(node: dict, top: bool = False) -> bytes:
    """The regex that matches the longest token along ``node``'s paths: each child is an
    alternative (they differ in their first byte); a node that ends a token adds an empty
    alternative after them, so the longer token is tried first."""
    alternatives = []
    # The alternatives begin with different bytes, so their order changes no match, only how
    # many the engine tries first: the busiest subtrees (most tokens) go first.
    for b in sorted((k for k in node if k >= 0), key=lambda k: -_count(node[k])):
        child = node[b]
        literal = re.escape(bytes((b,)))
        # A chain of single children that end no token is one literal run (less nesting).
        while len([k for k in child if k >= 0]) == 1 and -1 not in child:
            (b2,) = [k for k in child if k >= 0]
            literal += re.escape(bytes((b2,)))
            child = child[b2]
        alternatives.append(literal + _trie_regex(child))
    if not alternatives:
        return b""
    if -1 in node and not top:
        alternatives.append(b"")  # the token ending here, tried last (an empty branch: faster than "?")
    return alternatives[0] if len(alternatives) == 1 else b"(?:" + b"|".join(alternatives) + b")"


def _flatten(root: dict) -> tuple[array, array, array, bytes, array]:
    """The trie as the arrays of ``bpetok/models/_trie.c``: per node (breadth first, the root 0)
    its token id or -1, first edge and edge count; per edge its byte (sorted) and child."""
    values, first, count, edge_bytes, edge_child = array("i"), array("I"), array("I"), bytearray(), array("I")
    nodes = [root]
    for node in nodes:  # grows as children are queued
        children = sorted(k for k in node if k >= 0)
        values.append(node.get(-1, -1))
        first.append(len(edge_child))
        count.append(len(children))
        for b in children:
            edge_bytes.append(b)
            edge_child.append(len(nodes))
            nodes.append(node[b])
    return values, first, count, bytes(edge_bytes), edge_child


def _count(node: dict) -> int:
    """How many tokens the trie below ``node`` holds (memoised in the node under key -2)."""
    if -2 not in node:
        node[-2] = (-1 in node) + sum(_count(child) for key, child in node.items() if key >= 0)
    return node[-2]


# What this plugin registers: the model, and llama.cpp's defaults for it.
MODEL_SPEC = ModelSpec(
    name="rwkv", factory=RwkvModel, pretokenized=False,
    description="RWKV World: greedy longest match over Python-escaped byte tokens",
    add_bos=False, clean_spaces=False,
)


@hookimpl
def bpetok_register_models(register) -> None:
    register(MODEL_SPEC)
