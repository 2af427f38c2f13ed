"""Where each token of an encoding lies in its text: character and byte spans derived from the ids.

:func:`encode_with_offsets` encodes as :meth:`bpetok.Tokenizer.encode` does, then walks the
tokens' pieces (:meth:`~bpetok.Tokenizer.piece`) against the text's UTF-8 bytes; nothing is
guessed: a piece that is not the next bytes of the text is an :class:`OffsetsError`.

Conventions (the spans are half-open ``(start, end)``):

- ``byte_offsets`` are exact: every byte of the text (UTF-8; a lone surrogate as its 3 bytes)
  is in exactly one token's span, in order, except a byte that llama.cpp drops because the
  vocabulary has no token for it (a byte-level vocabulary without ``\x1d``'s token): it is in
  none, the spans around it leave a gap.
- ``offsets`` (characters, Python string indices) follow Hugging Face tokenizers' byte-level
  BPE: a token's span covers every character it holds a byte of. The byte-level pieces of one
  emoji each get the emoji's whole span, and ``partial`` is True for a token that starts or
  ends inside a character (its text is then not ``text[start:end]``).
- A special token's span covers its text and the whitespace its LSTRIP/RSTRIP attribute made it
  swallow (as HF's ``AddedToken(lstrip=True)`` does), so spans stay contiguous.
- BOS/EOS added by ``add_special`` get an empty span at the text's start / end.
- The space that SentencePiece-style models (llama's SPM) put in front of each fragment (the
  text's start, or right after a special token) is not in the text: it has no width, so a token
  that is only that ``▁`` gets an empty span at the fragment's start.

A model whose pieces are not the text's bytes (one that normalizes, lowercases or strips accents)
supplies its own alignment: a method ``token_offsets(tokenizer, text, ids, add_special)`` on the
model object returning a :class:`TokenOffsets`; without one, such a model's misaligned pieces
raise :class:`OffsetsError`.
"""

from __future__ import annotations

import weakref

import numpy as np
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Iterable

from bpetok.errors import BpetokError
from bpetok.models.base import gc_paused
from bpetok.vocab import TokenAttr

if TYPE_CHECKING:
    from bpetok.tokenizer import Tokenizer

__all__ = ["OffsetsError", "TokenOffsets", "encode_with_offsets", "encode_batch_with_offsets", "offsets_of_ids"]

_SPECIAL = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN
_ASCII_SPACE = b" \t\n\v\f\r"  # C isspace: what LSTRIP/RSTRIP strip (bpetok.tokenizer's _partition)


class OffsetsError(BpetokError):
    """The tokens' pieces are not the text's bytes, so their spans cannot be derived exactly."""


@dataclass(frozen=True)
class TokenOffsets:
    """An encoding with each token's span: ``ids[k]`` covers ``text[offsets[k][0]:offsets[k][1]]``
    (characters) and ``text.encode()[byte_offsets[k][0]:byte_offsets[k][1]]`` (bytes); ``partial[k]``:
    the token holds only part of a character at its start or end."""

    ids: list[int]
    offsets: list[tuple[int, int]]
    byte_offsets: list[tuple[int, int]]
    partial: list[bool]

    def __len__(self) -> int:
        return len(self.ids)


class _Column(dict):
    """One per-token fact, keyed by id, filled on first use (rendering a whole 256k vocabulary's
    pieces up front took over a second)."""

    def __init__(self, tables: _Tables, index: int):
        super().__init__()
        self.tables, self.index = tables, index

    def __missing__(self, token_id: int):
        return self.tables.fill(token_id)[self.index]


class _Tables:
    """Per-token facts the walk needs, for one tokenizer."""

    def __init__(self, tok: Tokenizer):
        self.tok = tok
        self.attrs = tok.vocabulary.attrs
        self.pieces = _Column(self, 0)  # what the token stands for in the text (a special: its text)
        self.lengths = _Column(self, 1)
        self.char_starts = _Column(self, 2)  # bytes of the piece that start a UTF-8 character
        self.mid_char = _Column(self, 3)  # the piece's first byte continues a character
        self.special = _Column(self, 4)  # cut out of the text by the partition (Tokenizer._partition)
        self._droppable: frozenset[int] | None = None
        # the numeric facts again as arrays, for the bulk walk; ``filled``: the ids done
        n = tok.n_tokens
        self.filled = np.zeros(n, dtype=bool)
        self.length_array = np.zeros(n, dtype=np.int64)
        self.char_start_array = np.zeros(n, dtype=np.int64)
        self.mid_char_array = np.zeros(n, dtype=bool)
        self.special_array = np.zeros(n, dtype=bool)

    def ensure(self, ids) -> None:
        """Fill the facts of every id in the array ``ids``."""
        missing = ids[~self.filled[ids]]
        for token_id in np.unique(missing).tolist():
            self.fill(token_id)

    def fill(self, token_id: int) -> tuple:
        piece = self.tok.piece(token_id)  # checks the id's range
        facts = (
            piece,
            len(piece),
            len(piece) - sum(1 for b in piece if 0x80 <= b < 0xC0),  # a byte 10xxxxxx continues a character
            bool(piece) and 0x80 <= piece[0] < 0xC0,
            bool(self.attrs[token_id] & _SPECIAL),
        )
        for column, value in zip((self.pieces, self.lengths, self.char_starts, self.mid_char, self.special), facts):
            column[token_id] = value
        for array, value in zip((self.length_array, self.char_start_array, self.mid_char_array, self.special_array), facts[1:]):
            array[token_id] = value
        self.filled[token_id] = True  # last: another thread may read the arrays as soon as this is set
        return facts

    @property
    def droppable(self) -> frozenset[int]:
        """Bytes no ordinary token is alone: llama.cpp drops such a byte where it finds no token."""
        if self._droppable is None:
            tokens, attrs, piece = self.tok.vocabulary.tokens, self.attrs, self.tok.piece
            # a one-byte piece is stored in at most 6 bytes (<0xXX>, or a byte-level character)
            alone = {piece(i)[0] for i in range(len(tokens)) if len(tokens[i]) <= 6 and not attrs[i] & _SPECIAL and len(piece(i)) == 1}
            self._droppable = frozenset(range(256)) - alone
        return self._droppable


_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _tables(tok: Tokenizer) -> _Tables:
    found = _TABLES.get(tok)
    if found is None:
        found = _TABLES[tok] = _Tables(tok)
    return found


def encode_with_offsets(tok: Tokenizer, text: str, *, parse_special: bool = True, add_special: bool = False) -> TokenOffsets:
    """``tok.encode(text, ...)`` with each token's character and byte span (see the module's conventions)."""
    ids = tok.encode(text, parse_special=parse_special, add_special=add_special)
    return offsets_of_ids(tok, text, ids, add_special=add_special)


def encode_batch_with_offsets(
    tok: Tokenizer, texts: Iterable[str], *, parse_special: bool = True, workers: int | None = None
) -> list[TokenOffsets]:
    """:meth:`bpetok.Tokenizer.encode_batch` (on ``workers`` threads) with every text's spans."""
    texts = list(texts)
    batch = tok.encode_batch(texts, parse_special=parse_special, workers=workers)
    return [offsets_of_ids(tok, text, ids) for text, ids in zip(texts, batch)]


def offsets_of_ids(tok: Tokenizer, text: str, ids: list[int], *, add_special: bool = False) -> TokenOffsets:
    """The spans of ``ids``, which must be ``tok.encode(text, add_special=add_special)`` (with either
    ``parse_special``); :class:`OffsetsError` where a piece is not the text's next bytes."""
    custom = tok.model.token_offsets(tok, text, ids, add_special)
    if custom is not None:
        return custom

    with gc_paused():  # the spans are hundreds of thousands of tuples that all live on
        return _Walk(tok, text).run(ids, add_special)


class _Walk:
    """One pass over the ids: runs of ordinary tokens are checked and measured in bulk (one join,
    one comparison, running sums); special tokens, few, one at a time."""

    bulk = True  # False: every run token by token (the readable twin; tests compare the two)

    def __init__(self, tok: Tokenizer, text: str):
        self.tok = tok
        self.t = _tables(tok)
        self.data = text.encode("utf-8", "surrogatepass")
        # where a whole-fragment model writes a space in front of each fragment (llama's SPM)
        self.prefix_space = tok.model.add_space_prefix
        self.pos = 0  # bytes of the text accounted for
        self.chars = 0  # characters before self.pos
        self.offsets: list[tuple[int, int]] = []
        self.byte_offsets: list[tuple[int, int]] = []
        self.partial: list[bool] = []

    def run(self, ids: list[int], add_special: bool) -> TokenOffsets:
        tok, n = self.tok, len(ids)
        head = 1 if add_special and tok.add_bos and n else 0
        tail = 1 if add_special and tok.add_eos and n > head else 0
        self._empty(head)
        body = ids[head : n - tail]
        array = np.array(body, dtype=np.int64)
        if len(body) and (array.min() < 0 or array.max() >= tok.n_tokens):
            tok.piece(int(array.min() if array.min() < 0 else array.max()))  # the id error of a token id out of range
        self.t.ensure(array)
        at_start, run_start = True, 0
        for k in np.flatnonzero(self.t.special_array[array]).tolist():
            if k > run_start:
                self._ordinary(body[run_start:k], array[run_start:k], at_start)
            self._special(body[k])
            at_start, run_start = True, k + 1
        if run_start < len(body):
            self._ordinary(body[run_start:], array[run_start:], at_start)
        self._skip_dropped(None)
        if self.pos != len(self.data):
            self._fail(f"the tokens end at byte {self.pos} of {len(self.data)}")
        self._empty(tail)
        return TokenOffsets(list(ids), self.offsets, self.byte_offsets, self.partial)

    def _empty(self, count: int) -> None:
        for _ in range(count):
            self.offsets.append((self.chars, self.chars))
            self.byte_offsets.append((self.pos, self.pos))
            self.partial.append(False)

    def _ordinary(self, run: list[int], array, at_start: bool) -> None:
        t, p = self.t, self.pos
        pieces = itemgetter(*run)(t.pieces) if len(run) > 1 else (t.pieces[run[0]],)
        joined = b"".join(pieces)
        lengths = t.length_array[array]  # copies: changed below
        char_starts = t.char_start_array[array]
        if self.prefix_space and at_start:
            if joined[:1] != b" ":
                self._fail(f"token {run[0]} {pieces[0]!r} at byte {p} lacks the space the model adds in front")
            joined = joined[1:]
            lengths[0] -= 1
            char_starts[0] -= 1
        end = p + len(joined)
        if not self.bulk or self.data[p:end] != joined:
            self._ordinary_with_gaps(run, pieces, lengths.tolist(), char_starts.tolist())
            return
        byte_ends = np.cumsum(lengths) + p
        char_ends = np.cumsum(char_starts) + self.chars
        mid = t.mid_char_array[array]
        ends_mid = np.append(mid[1:], False)  # a run ends where a character does (before a special, or the end)
        byte_starts = np.append(p, byte_ends[:-1])
        char_first = np.append(self.chars, char_ends[:-1]) - mid
        self.byte_offsets += zip(byte_starts.tolist(), byte_ends.tolist())
        self.offsets += zip(char_first.tolist(), char_ends.tolist())
        self.partial += (mid | ends_mid).tolist()
        self.pos, self.chars = end, int(char_ends[-1])

    def _ordinary_with_gaps(self, run: list[int], pieces, lengths: list[int], char_starts: list[int]) -> None:
        """:meth:`_ordinary` token by token, for a run whose pieces are the text's bytes only once
        the bytes llama.cpp dropped are skipped (the readable twin of the bulk walk, held equal
        to it by the tests where there is no gap)."""
        data, t = self.data, self.t
        for k, token_id in enumerate(run):
            piece = pieces[k][len(pieces[k]) - lengths[k] :]  # less the space in front, for the first
            self._skip_dropped(piece)
            start, end = self.pos, self.pos + len(piece)
            if data[start:end] != piece:
                self._fail(f"token {token_id} {pieces[k]!r} is not the text's bytes at byte {start}")
            mid = t.mid_char[token_id] and bool(piece)
            ends_mid = end < len(data) and 0x80 <= data[end] < 0xC0
            chars = self.chars + char_starts[k]
            self.byte_offsets.append((start, end))
            self.offsets.append((self.chars - mid, chars))
            self.partial.append(mid or ends_mid)
            self.pos, self.chars = end, chars

    def _skip_dropped(self, expected: bytes | None) -> None:
        """Step over bytes llama.cpp dropped (no token holds them alone) until ``expected`` is
        next (None: the text's end)."""
        data, at = self.data, self.pos

        def found(at: int) -> bool:
            return at == len(data) if expected is None else data.startswith(expected, at)

        while not found(at) and at < len(data) and data[at] in self.t.droppable:
            at += 1
        if at > self.pos and found(at):
            self.chars += sum(1 for b in data[self.pos : at] if not 0x80 <= b < 0xC0)
            self.pos = at

    def _special(self, token_id: int) -> None:
        data, piece, attr = self.data, self.t.pieces[token_id], self.tok.vocabulary.attrs[token_id]
        self._skip_dropped(piece)
        start = at = self.pos
        if not data.startswith(piece, at) and attr & TokenAttr.LSTRIP:
            while at < len(data) and data[at] in _ASCII_SPACE:
                at += 1
        if not data.startswith(piece, at):
            self._fail(f"special token {token_id} {piece!r} is not at byte {start}")
        end = at + len(piece)
        if attr & TokenAttr.RSTRIP:
            while end < len(data) and data[end] in _ASCII_SPACE:
                end += 1
        chars = self.chars + (at - start) + self.t.char_starts[token_id] + (end - at - len(piece))
        self.byte_offsets.append((start, end))
        self.offsets.append((self.chars, chars))
        self.partial.append(False)
        self.pos, self.chars = end, chars

    def _fail(self, why: str):
        vocab = self.tok.vocabulary
        raise OffsetsError(
            f"{vocab.path}: cannot derive token offsets for this {vocab.model} model: {why}; "
            "its pieces are not the input's bytes (a normalizing model needs its own token_offsets)"
        )
