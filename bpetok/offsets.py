"""Where each token of an encoding lies in its text: character and byte spans derived from the ids.

:func:`encode_with_offsets` encodes as :meth:`bpetok.Tokenizer.encode` does and derives the spans
from encode's ids with numpy: each token's byte and character length from a per-vocabulary table,
one running sum for both (the tokens' pieces are the text's bytes, one after the other), each
special token checked to be where the sums put it (with the whitespace LSTRIP/RSTRIP made it
swallow), the total checked to be the text's length. Where the sums fall short (a byte llama.cpp
dropped), the spans come from :func:`offsets_by_walk`, the readable token-by-token twin that tests
hold the fast path equal to. :func:`offsets_of_ids`, for ids you bring, also compares every piece
with the text: nothing is guessed, a piece that is not the next bytes of the text is an
:class:`OffsetsError`.

Conventions (the spans are half-open ``(start, end)``):

- ``byte_offsets`` are exact: every byte of the text (UTF-8; a lone surrogate as its 3 bytes)
  is in exactly one token's span, in order, except a byte that llama.cpp drops because the
  vocabulary has no token for it (a byte-level vocabulary without ``\\x1d``'s token), or text
  the model drops (the whitespace model's whitespace, plamo2's special tokens): it is in none,
  the spans around it leave a gap.
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

A model whose pieces are not the text's bytes supplies its own alignment
(:meth:`~bpetok.models.TokenizerModel.aligns_offsets` says for which texts, ``token_offsets``
gives them): whitespace sums its tokens over the characters it keeps (:func:`spans_over_kept_chars`),
plamo2 walks with gaps, bert and t5 (they normalize) follow their
normalizer's alignment (:mod:`bpetok.models.norm_offsets`), hybriddna's k-mers raise
:class:`OffsetsError` saying why.
"""

from __future__ import annotations

import weakref
from array import array
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from bpetok.errors import BpetokError
from bpetok.models.base import gc_paused
from bpetok.vocab import TokenAttr

if TYPE_CHECKING:
    from bpetok.tokenizer import Tokenizer

__all__ = ["OffsetsError", "TokenOffsets", "encode_with_offsets", "encode_batch_with_offsets", "offsets_of_ids", "offsets_by_walk"]

_SPECIAL = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN
_ASCII_SPACE = b" \t\n\v\f\r"  # C isspace: what LSTRIP/RSTRIP strip (bpetok.specials' partition)


class OffsetsError(BpetokError):
    """The tokens' pieces are not the text's bytes, so their spans cannot be derived exactly."""


def refuse_offsets(tok: Tokenizer, why: str):
    """Raise the :class:`OffsetsError` of a model that cannot give exact spans, saying ``why``
    (a model's ``token_offsets`` calls it)."""
    vocab = tok.vocabulary
    raise OffsetsError(
        f"{vocab.path}: bpetok gives no token offsets for a {vocab.model} model: {why}; "
        "use encode() without offsets for this vocabulary"
    )


class TokenOffsets:
    """An encoding with each token's span: ``ids[k]`` covers ``text[offsets[k][0]:offsets[k][1]]``
    (characters) and ``text.encode()[byte_offsets[k][0]:byte_offsets[k][1]]`` (bytes); ``partial[k]``:
    the token holds only part of a character at its start or end.

    ``char_spans`` and ``byte_spans`` (``(n, 2)`` int64 numpy arrays) and ``partial_mask`` (bool)
    are the quick form for a long text: :func:`encode_with_offsets` makes no Python object per
    token. They are the TokenOffsets' own arrays, the same ones at each read (copy one before
    changing it). ``ids``, ``offsets``, ``byte_offsets`` and ``partial`` are the same as lists
    (of tuples), made on first use."""

    __slots__ = ("_lists", "_arrays", "_ids")

    def __init__(self, ids, offsets, byte_offsets, partial):
        self._lists: tuple | None = (list(ids), list(offsets), list(byte_offsets), list(partial))
        self._arrays: tuple | None = None
        self._ids: list[int] | None = self._lists[0]

    @classmethod
    def _of_arrays(cls, ids, byte_spans, char_spans, partial) -> TokenOffsets:
        """From arrays, as the fast paths make them: the ids, the ``(n, 2)`` spans, ``partial``."""
        found = cls.__new__(cls)
        found._lists, found._arrays = None, (ids, byte_spans, char_spans, partial)
        found._ids = None
        return found

    def _id_list(self) -> list[int]:
        """The ids alone as a list: reading them does not make the tuple lists of the spans."""
        if self._ids is None:
            self._ids = self._lists[0] if self._lists is not None else self._arrays[0].tolist()  # type: ignore[index]
        return self._ids

    def _as_lists(self) -> tuple:
        if self._lists is None:
            ids, byte_spans, char_spans, partial = self._arrays  # type: ignore[misc]
            with gc_paused():  # a tuple per token, which all live on: a collection would only rescan them
                self._lists = (
                    self._id_list(),
                    list(zip(char_spans[:, 0].tolist(), char_spans[:, 1].tolist())),
                    list(zip(byte_spans[:, 0].tolist(), byte_spans[:, 1].tolist())),
                    partial.tolist(),
                )
        return self._lists

    def _as_arrays(self) -> tuple:
        if self._arrays is None:
            ids, offsets, byte_offsets, partial = self._lists  # type: ignore[misc]
            self._arrays = (
                np.array(ids, dtype=np.int64),
                np.array(byte_offsets, dtype=np.int64).reshape(-1, 2),
                np.array(offsets, dtype=np.int64).reshape(-1, 2),
                np.array(partial, dtype=bool),
            )
        return self._arrays

    ids = property(lambda self: self._id_list(), doc="The token ids (``Tokenizer.encode``'s list).")
    offsets = property(lambda self: self._as_lists()[1], doc="Each token's character span.")
    byte_offsets = property(lambda self: self._as_lists()[2], doc="Each token's byte span in the text's UTF-8.")
    partial = property(lambda self: self._as_lists()[3], doc="Whether the token starts or ends inside a character.")
    char_spans = property(lambda self: self._as_arrays()[2], doc="``offsets`` as an ``(n, 2)`` int64 array.")
    byte_spans = property(lambda self: self._as_arrays()[1], doc="``byte_offsets`` as an ``(n, 2)`` array.")
    partial_mask = property(lambda self: self._as_arrays()[3], doc="``partial`` as a bool array.")

    def __len__(self) -> int:
        return len(self._as_arrays()[0] if self._lists is None else self._lists[0])

    def __eq__(self, other) -> bool:
        if not isinstance(other, TokenOffsets):
            return NotImplemented
        return all(np.array_equal(a, b) for a, b in zip(self._as_arrays(), other._as_arrays()))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        ids, offsets, byte_offsets, partial = self._as_lists()
        return f"TokenOffsets(ids={ids!r}, offsets={offsets!r}, byte_offsets={byte_offsets!r}, partial={partial!r})"


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte < 0xC0  # 10xxxxxx continues a UTF-8 character


def _characters_in(data: bytes) -> int:
    return sum(1 for b in data if not _is_continuation(b))


_PACK = 1 << 32  # a token's byte length and its characters as one number: bytes * _PACK + characters
_LOW = _PACK - 1
# bits of _Tables.kinds: the token is special (cut out by the partition), not yet known, starts
# with a byte that continues a character (10xxxxxx: a byte-level piece of a character)
_SPECIAL_TOKEN, _UNFILLED, _STARTS_MID = 1, 2, 4
# _Tables.steps' first column for a token to look up in kinds (special, or not yet known)
_SEE_KINDS = 1


class _Tables:
    """Per-token facts, for one tokenizer, filled for the ids met (rendering a whole 256k
    vocabulary's pieces up front took over a second)."""

    def __init__(self, tok: Tokenizer):
        self.tok = tok
        self.attrs = tok.vocabulary.attrs
        self.pieces: dict[int, bytes] = {}  # what the token stands for in the text (a special: its text)
        self._droppable: frozenset[int] | None = None
        self._keeps_continuations: bool | None = None
        n = tok.n_tokens
        # A token's two steps in a running sum over the text, packed (_PACK: bytes and characters
        # at once): to its span's start (-1 character where its piece starts inside a character,
        # whose whole span it then covers) and on to its end, the two together its piece's bytes
        # and its bytes that start a character. The running sum over the tokens' steps one after
        # the other is each token's (start, end). A special token, or one not yet known, has
        # _SEE_KINDS first (a special's steps once that is 0).
        self.steps = np.zeros((n, 2), dtype=np.int64)
        self.steps[:, 0] = _SEE_KINDS
        self.kinds = np.full(n, _UNFILLED, dtype=np.int8)

    def ensure(self, ids: np.ndarray) -> None:
        """Fill the facts of every id in the array ``ids`` (in range)."""
        missing = ids[self.kinds[ids] & _UNFILLED != 0]
        for token_id in np.unique(missing).tolist():
            piece = self.tok.piece(token_id)
            self.pieces[token_id] = piece
            special = self.attrs[token_id] & _SPECIAL
            starts_mid = bool(piece) and _is_continuation(piece[0])
            length = len(piece) * _PACK + _characters_in(piece)
            self.steps[token_id] = (_SEE_KINDS, length) if special else (-starts_mid, length + starts_mid)
            # last: another thread may read the arrays as soon as this is set
            self.kinds[token_id] = (_SPECIAL_TOKEN if special else 0) | (_STARTS_MID if starts_mid else 0)

    @property
    def droppable(self) -> frozenset[int]:
        """Bytes no ordinary token is alone: llama.cpp drops such a byte where it finds no token."""
        if self._droppable is None:
            tokens, attrs, piece = self.tok.vocabulary.tokens, self.attrs, self.tok.piece
            # a one-byte piece is stored in at most 6 bytes (<0xXX>, or a byte-level character)
            alone = {piece(i)[0] for i in range(len(tokens)) if len(tokens[i]) <= 6 and not attrs[i] & _SPECIAL and len(piece(i)) == 1}
            self._droppable = frozenset(range(256)) - alone
        return self._droppable

    @property
    def keeps_continuations(self) -> bool:
        """Whether every byte that continues a character (10xxxxxx) is an ordinary token alone,
        so none is :attr:`droppable`: a byte llama.cpp dropped then starts a character, and the
        tokens' characters fall short of the text's. Looked up as such a token is stored (a
        byte-level character, ``<0xXX>``, the byte), not by rendering the vocabulary's pieces
        (as ``droppable`` does): False where it is stored otherwise."""
        if self._keeps_continuations is None:
            from bpetok.models.gpt2.bpe import BYTE_TO_CHAR

            index, attrs, piece = self.tok.vocabulary.token_index(), self.attrs, self.tok.piece

            def alone(byte: int) -> bool:
                forms = (BYTE_TO_CHAR[byte].encode(), b"<0x%02X>" % byte, bytes((byte,)))
                found = (index.get(form) for form in forms)
                return any(i is not None and not attrs[i] & _SPECIAL and piece(i) == bytes((byte,)) for i in found)

            self._keeps_continuations = all(map(alone, range(0x80, 0xC0)))
        return self._keeps_continuations


_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _tables(tok: Tokenizer) -> _Tables:
    found = _TABLES.get(tok)
    if found is None:
        found = _TABLES[tok] = _Tables(tok)
    return found


def _own_alignment(tok: Tokenizer, text: str) -> bool:
    """Whether the model's ``token_offsets`` gives this text's spans (it normalizes, drops text...)."""
    return tok.model.aligns_offsets(text)


def _added(tok: Tokenizer, add_special: bool) -> tuple[list[int], list[int]]:
    """The ids ``add_special`` puts before and after a text's (BOS; EOS, SEP), as encode adds them."""
    added = tok.encode("", parse_special=False, add_special=add_special)  # which also checks the flag
    head = 1 if add_special and tok.add_bos else 0
    return added[:head], added[head:]


def encode_with_offsets(tok: Tokenizer, text: str, *, parse_special: bool = True, add_special: bool = False) -> TokenOffsets:
    """``tok.encode(text, ...)`` with each token's character and byte span (see the module's conventions)."""
    if not isinstance(text, str):
        raise TypeError(f"encode_with_offsets() takes a str, not {type(text).__name__}")
    if parse_special.__class__ is bool and _own_alignment(tok, text):
        one_pass = tok.model.encode_with_offsets(tok, text, parse_special, add_special)
        if one_pass is not None:
            return one_pass
    body = _ids_array(tok, text, parse_special)
    added = _added(tok, add_special)
    if _own_alignment(tok, text):
        custom = tok.model.token_offsets(tok, text, added[0] + body.tolist() + added[1], add_special)
        if custom is not None:
            return custom
    return _offsets_of_own_ids(tok, text, body, added)


def _ids_array(tok: Tokenizer, text: str, parse_special: bool) -> np.ndarray:
    """``tok.encode(text)``'s ids as an array: encode_batch_to_numpy's where the model's kernel
    encodes without the GIL (byte-level BPE: it fills machine words, no int per id); else, where
    encode is one C call (the tokenizer's text encoder: SentencePiece's), its ids as int32 bytes
    where it gives them, else its list converted, for encode_batch_to_numpy would cut the text and
    encode fragment by fragment."""
    encoder = tok._text_encoder
    if encoder is not None and not tok.encodes_without_gil:
        if tok.model.text_encoder_gives_bytes and text and parse_special.__class__ is bool:
            with_bytes: Callable[..., Any] = encoder  # its third argument, as_bytes
            found = with_bytes(text, parse_special, True)  # what encode calls, its ids as machine words
            if found is not None:
                return np.frombuffer(found, dtype=np.int32)
        return np.frombuffer(array("I", tok.encode(text, parse_special=parse_special)), dtype=np.uint32)
    return tok.encode_batch_to_numpy([text], parse_special=parse_special, workers=1)[0]


def encode_batch_with_offsets(
    tok: Tokenizer, texts: Iterable[str], *, parse_special: bool = True, workers: int | None = None
) -> list[TokenOffsets]:
    """:meth:`bpetok.Tokenizer.encode_batch` (on ``workers`` threads) with every text's spans."""
    texts = list(texts)
    ids, bounds = tok.encode_batch_to_numpy(texts, parse_special=parse_special, workers=workers)
    bounds = bounds.tolist()
    found = []
    for i, text in enumerate(texts):
        body = ids[bounds[i] : bounds[i + 1]]
        custom = tok.model.token_offsets(tok, text, body.tolist(), False) if _own_alignment(tok, text) else None
        found.append(custom if custom is not None else _offsets_of_own_ids(tok, text, body, ([], [])))
    return found


def offsets_of_ids(tok: Tokenizer, text: str, ids: Sequence[int], *, add_special: bool = False) -> TokenOffsets:
    """The spans of ``ids``, which must be ``tok.encode(text, add_special=add_special)`` (with either
    ``parse_special``); :class:`OffsetsError` where a piece is not the text's next bytes."""
    custom = tok.model.token_offsets(tok, text, list(ids), add_special) if _own_alignment(tok, text) else None
    if custom is not None:
        return custom
    head, tail = _added(tok, add_special)
    n = len(ids)
    if n < len(head) + len(tail) or list(ids[: len(head)]) != head or list(ids[n - len(tail) :]) != tail:
        return offsets_by_walk(tok, text, ids, add_special=add_special)  # it names what is wrong
    body = np.asarray(ids[len(head) : n - len(tail)], dtype=np.int64)
    found = _spans_from_lengths(tok, text, body, (head, tail), check_pieces=True)
    return found if found is not None else offsets_by_walk(tok, text, ids, add_special=add_special)


def _offsets_of_own_ids(tok: Tokenizer, text: str, body: np.ndarray, added: tuple[list[int], list[int]]) -> TokenOffsets:
    """The spans of encode's own ids (``body``, without what add_special added)."""
    found = _spans_from_lengths(tok, text, body, added, check_pieces=False)
    if found is None:
        return offsets_by_walk(tok, text, added[0] + body.tolist() + added[1], add_special=bool(added[0] or added[1]))
    return found


def _spans_from_lengths(
    tok: Tokenizer, text: str, body: np.ndarray, added: tuple[list[int], list[int]], check_pieces: bool
) -> TokenOffsets | None:
    """The fast path: spans as running sums of the pieces' lengths, or None where that does not
    give the text (the walk then finds the gaps or says what is wrong). ``check_pieces``: also
    compare the ordinary tokens' pieces with the text (ids encode did not make)."""
    t = _tables(tok)
    if check_pieces and len(body) and (int(body.min()) < 0 or int(body.max()) >= tok.n_tokens):
        return None
    index = body.astype(np.intp)  # numpy gathers by intp fastest
    byte_spans, char_spans, body_bytes, body_chars = _rows(len(body), added)
    # each token's steps (_Tables.steps), summed in place below into its packed span; "clip":
    # the ids are in range (checked above, or encode's), and it writes out unbuffered
    steps = t.steps.take(index, axis=0, out=body_bytes, mode="clip")
    specials: list[int] = []
    if len(body) and steps[:, 0].max() > 0:  # a special, or a token not yet known
        flagged = np.flatnonzero(steps[:, 0] == _SEE_KINDS)
        if (t.kinds[index[flagged]] & _UNFILLED).any():
            t.ensure(index)
            t.steps.take(index, axis=0, out=steps, mode="clip")
            flagged = np.flatnonzero(steps[:, 0] == _SEE_KINDS)
        specials = flagged.tolist()  # every token is known now: those still flagged are special
        steps[specials, 0] = 0  # a special's span starts at its text, where the one before ends
    if tok.model.add_space_prefix:  # each fragment's first token holds the space the model added
        starts = [0] + ([k + 1 for k in specials] if tok.model.start_after_special else [])
        for k in sorted(set(starts) - set(specials)):
            if k < len(body):
                if t.pieces[int(body[k])][:1] != b" ":
                    return None
                steps[k, 1] -= _PACK + 1
    # The text's UTF-8 is wanted for the specials, the pieces' check, and its length; where no
    # byte that continues a character can be dropped, the character count stands in for the length.
    encoded = bool(specials) or check_pieces or not t.keeps_continuations
    data = text.encode("utf-8", "surrogatepass") if encoded else b""
    if specials:
        lengths = steps.copy()  # what the specials' loop changes, if it must
    spans = steps  # summed in place: a long text's fresh pages cost more than its sums
    np.cumsum(spans.reshape(-1), out=spans.reshape(-1))
    if specials:  # each where the sums put it; whitespace it swallowed (ASCII) joins its span
        shift = 0
        for k in specials:
            token_id = int(body[k])
            piece, attr = t.pieces[token_id], t.attrs[token_id]
            start = at = (int(spans[k, 0]) >> 32) + shift
            if not data.startswith(piece, at) and attr & TokenAttr.LSTRIP:
                while at < len(data) and data[at] in _ASCII_SPACE:
                    at += 1
            if not data.startswith(piece, at):
                return None
            end = at + len(piece)
            if attr & TokenAttr.RSTRIP:
                while end < len(data) and data[end] in _ASCII_SPACE:
                    end += 1
            swallowed = end - start - len(piece)
            lengths[k, 1] += swallowed * (_PACK + 1)
            shift += swallowed
        if shift:
            np.cumsum(lengths.reshape(-1), out=spans.reshape(-1))
    total = int(spans[-1, 1]) if len(body) else 0
    if total >> 32 != len(data) if encoded else total & _LOW != len(text):
        return None
    np.bitwise_and(spans, _LOW, out=body_chars)
    np.right_shift(spans, 32, out=body_bytes)  # (spans is body_bytes: last)
    if check_pieces and not _pieces_are_the_text(t, data, body, specials, body_bytes[:, 0], body_bytes[:, 1]):
        return None
    if text.isascii():  # (an ASCII text's pieces all start and end on a character)
        partial = np.zeros(len(body), dtype=bool)
    else:  # a token is partial where a bound of its span is inside a character
        inside = np.zeros(len(body) + 1, dtype=bool)  # at each token's start, and the text's end
        # an ordinary token's span starts inside one where it starts before the one before ends
        np.not_equal(body_chars[:-1, 1], body_chars[1:, 0], out=inside[1:-1])
        inside[specials] = t.kinds[index[specials]] & _STARTS_MID != 0  # a special's at its text
        partial = inside[:-1] | inside[1:]
        partial[specials] = False  # (as the walk has it: a special's span is its text's)
    return _with_added(body, added, total >> 32, len(text), byte_spans, char_spans, partial)


def spans_over_kept_bytes(
    text: str, body: np.ndarray, added: tuple[list[int], list[int]], lengths: np.ndarray, dropped: np.ndarray
) -> TokenOffsets | None:
    """The fast path of a model that drops some of the text's bytes (``dropped``: a bool per byte
    of its UTF-8) and whose tokens (``body``) spell the others in order (``lengths``: each one's
    bytes, none empty); None where the lengths do not add up to the kept bytes (the model's walk
    then finds what else it dropped)."""
    kept = np.flatnonzero(~dropped)
    if len(body) == 0 or int(lengths.sum()) != len(kept) or not lengths.all():
        return None if len(kept) or len(body) else _empty_spans(text, added)
    ends = np.cumsum(lengths)
    byte_spans, char_spans, body_bytes, body_chars = _rows(len(body), added)
    body_bytes[:, 0], body_bytes[:, 1] = kept[ends - lengths], kept[ends - 1] + 1
    data = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    continues = np.append((data & 0xC0) == 0x80, False)  # the end continues no character
    chars_before = np.zeros(len(data) + 1, dtype=np.int64)  # characters before each byte
    np.cumsum(~continues[:-1], out=chars_before[1:])
    starts_mid, ends_mid = continues[body_bytes[:, 0]], continues[body_bytes[:, 1]]
    body_chars[:, 0], body_chars[:, 1] = chars_before[body_bytes[:, 0]] - starts_mid, chars_before[body_bytes[:, 1]]
    return _with_added(body, added, len(data), len(text), byte_spans, char_spans, starts_mid | ends_mid)


def spans_over_kept_chars(
    text: str, body: np.ndarray, added: tuple[list[int], list[int]], spelled: np.ndarray, dropped: np.ndarray, sizes: np.ndarray
) -> TokenOffsets | None:
    """:func:`spans_over_kept_bytes` where each token spells whole characters (``spelled``: its
    bytes * ``_PACK`` + its characters, none empty), counted in characters (``dropped`` and
    ``sizes``, each character's UTF-8 bytes, one per character): a token's bytes are those of the
    characters in its span, which a running sum over the characters' sizes gives. None where the
    tokens do not add up to the kept characters."""
    kept = np.flatnonzero(~dropped)
    ends = np.cumsum(spelled)
    if len(body) == 0 or int(ends[-1]) & _LOW != len(kept):
        return None if len(kept) or len(body) else _empty_spans(text, added)
    kept_ends = ends & _LOW
    kept_before = kept_ends - (spelled & _LOW)  # kept characters before each token
    byte_spans, char_spans, body_bytes, body_chars = _rows(len(body), added)
    body_chars[:, 0] = kept[kept_before]
    body_chars[:, 1] = kept[kept_ends - 1] + 1
    n_bytes = len(text)
    if text.isascii():
        body_bytes[:] = body_chars
    else:
        bytes_before = np.empty(len(sizes) + 1, dtype=np.int64)  # the text's bytes before each character
        bytes_before[0] = 0  # (not zeros: calloc hands a long text fresh pages)
        np.cumsum(sizes, out=bytes_before[1:])
        bytes_before.take(body_chars, out=body_bytes, mode="clip")  # (in range; "clip" writes out unbuffered)
        n_bytes = int(bytes_before[-1])
    return _with_added(body, added, n_bytes, len(text), byte_spans, char_spans, np.zeros(len(body), dtype=bool))


def _empty_spans(text: str, added: tuple[list[int], list[int]]) -> TokenOffsets:
    byte_spans, char_spans, _, _ = _rows(0, added)
    none = np.zeros(0, dtype=np.int64)
    return _with_added(none, added, len(text.encode("utf-8", "surrogatepass")), len(text), byte_spans, char_spans, none.astype(bool))


def _rows(n: int, added: tuple[list[int], list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ``(rows, 2)`` byte and character spans of ``n`` tokens and what add_special put around
    them, and the tokens' rows of each, which the caller fills (:func:`_with_added` the others):
    the spans are made where they are kept, not stacked from columns."""
    head, tail = added
    # one allocation for both: a long text's spans are one block, which the allocator keeps for
    # the next call (two, and it hands their pages back, each page then faulted in afresh)
    byte_spans, char_spans = np.empty((2, len(head) + n + len(tail), 2), dtype=np.int64)
    return byte_spans, char_spans, byte_spans[len(head) : len(head) + n], char_spans[len(head) : len(head) + n]


def _with_added(body, added, n_bytes: int, n_chars: int, byte_spans, char_spans, partial) -> TokenOffsets:
    """The spans (:func:`_rows`) with empty ones for what add_special put before (at 0) and after (at the end)."""
    head, tail = added
    ids = body
    if head or tail:
        byte_spans[: len(head)] = char_spans[: len(head)] = 0
        end = len(byte_spans) - len(tail)
        byte_spans[end:], char_spans[end:] = n_bytes, n_chars
        ids = np.concatenate((np.array(head, dtype=np.int64), body, np.array(tail, dtype=np.int64)))
        partial = np.concatenate((np.zeros(len(head), dtype=bool), partial, np.zeros(len(tail), dtype=bool)))
    return TokenOffsets._of_arrays(ids, byte_spans, char_spans, partial)


def _pieces_are_the_text(t: _Tables, data: bytes, body, specials: list[int], starts, ends) -> bool:
    """Whether each run of ordinary tokens' pieces (less a model's space prefix) is the text under it."""
    bounds = [-1, *specials, len(body)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b - a > 1:
            run = body[a + 1 : b].tolist()
            joined = b"".join(map(t.pieces.__getitem__, run))
            s, e = int(starts[a + 1]), int(ends[b - 1])
            if joined[len(joined) - (e - s) :] != data[s:e] or len(joined) - (e - s) not in (0, 1):
                return False
    return True


def offsets_by_walk(
    tok: Tokenizer,
    text: str,
    ids: Sequence[int],
    *,
    add_special: bool = False,
    gap: Callable[[bytes, int], int] | None = None,
    spelling: Callable[[int], bytes] | None = None,
) -> TokenOffsets:
    """The spans of ``ids`` token by token, each piece compared with the text's next bytes: the
    readable twin of the fast path, and what a model with gaps uses. ``gap(data, at)``: where
    text the model dropped at byte ``at`` ends (``at``: none there), tried where the next piece is
    not next in the text. ``spelling``: the
    bytes an ordinary token matched in the text, where that is not its piece."""
    return _Walk(tok, text, gap, spelling).run(list(ids), add_special)


class _Walk:
    """One pass over the ids against the text's bytes."""

    def __init__(self, tok: Tokenizer, text: str, gap: Callable[[bytes, int], int] | None, spelling: Callable[[int], bytes] | None):
        self.tok, self.t, self.gap = tok, _tables(tok), gap
        self.spelling = spelling if spelling is not None else self.t.pieces.__getitem__
        self.data = text.encode("utf-8", "surrogatepass")
        self.pos = 0  # bytes of the text accounted for
        self.chars = 0  # characters before self.pos
        self.offsets: list[tuple[int, int]] = []
        self.byte_offsets: list[tuple[int, int]] = []
        self.partial: list[bool] = []

    def run(self, ids: list[int], add_special: bool) -> TokenOffsets:
        tok = self.tok
        head, tail = _added(tok, add_special)
        if len(ids) < len(head) + len(tail) or ids[: len(head)] != head or ids[len(ids) - len(tail) :] != tail:
            self._fail(f"add_special={add_special} wants {head} first and {tail} last, and the ids are {ids[:3]}...{ids[-3:]}")
        body = ids[len(head) : len(ids) - len(tail)]
        for token_id in body:
            tok.piece(token_id)  # the error of an id out of range
        self.t.ensure(np.array(body, dtype=np.int64))
        self._empty(len(head))
        at_start = True
        for token_id in body:
            if self.t.kinds[token_id] & _SPECIAL_TOKEN:
                self._special(token_id)
                at_start = tok.model.start_after_special
            else:
                self._ordinary(token_id, at_start)
                at_start = False
        self._skip_gap(None)
        if self.pos != len(self.data):
            self._fail(f"the tokens end at byte {self.pos} of {len(self.data)}")
        self._empty(len(tail))
        return TokenOffsets(ids, self.offsets, self.byte_offsets, self.partial)

    def _empty(self, count: int) -> None:
        for _ in range(count):
            self.offsets.append((self.chars, self.chars))
            self.byte_offsets.append((self.pos, self.pos))
            self.partial.append(False)

    def _ordinary(self, token_id: int, at_start: bool) -> None:
        data, piece = self.data, self.spelling(token_id)
        if self.tok.model.add_space_prefix and at_start:
            if piece[:1] != b" ":
                self._fail(f"token {token_id} {piece!r} at byte {self.pos} lacks the space the model adds in front")
            piece = piece[1:]
        self._skip_gap(piece)
        start, end = self.pos, self.pos + len(piece)
        if data[start:end] != piece:
            self._fail(f"token {token_id} {self.spelling(token_id)!r} is not the text's bytes at byte {start}")
        starts_mid = bool(piece) and _is_continuation(piece[0])
        ends_mid = end < len(data) and _is_continuation(data[end])
        chars = self.chars + _characters_in(piece)
        self.byte_offsets.append((start, end))
        self.offsets.append((self.chars - starts_mid, chars))
        self.partial.append(starts_mid or ends_mid)
        self.pos, self.chars = end, chars

    def _special(self, token_id: int) -> None:
        data, piece, attr = self.data, self.t.pieces[token_id], self.tok.vocabulary.attrs[token_id]
        self._skip_gap(piece)
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
        chars = self.chars + _characters_in(data[start:end])
        self.byte_offsets.append((start, end))
        self.offsets.append((self.chars, chars))
        self.partial.append(False)
        self.pos, self.chars = end, chars

    def _skip_gap(self, expected: bytes | None) -> None:
        """Step over text with no token (bytes llama.cpp dropped, which no token holds alone;
        what the model drops: ``gap``) until ``expected`` is next (None: the text's end)."""
        data, at = self.data, self.pos

        def found(at: int) -> bool:
            return at == len(data) if expected is None else data.startswith(expected, at)

        while not found(at) and at < len(data):
            gap_end = self.gap(data, at) if self.gap is not None else at
            if gap_end > at:
                at = gap_end
            elif data[at] in self.t.droppable:
                at += 1
            else:
                break
        if at > self.pos and found(at):
            self.chars += _characters_in(data[self.pos : at])
            self.pos = at

    def _fail(self, why: str):
        vocab = self.tok.vocabulary
        raise OffsetsError(
            f"{vocab.path}: cannot derive token offsets for this {vocab.model} model: {why}; the ids' pieces "
            "must be the text's bytes (ids of another text, or a token like <unk> that does not spell its text, have none)"
        )
