"""Ids back to bytes and text, as llama.cpp's ``token_to_piece`` and ``llama_detokenize`` give them.

:class:`Decoding` is the decoding half of :class:`bpetok.Tokenizer` (its base class): a token's
piece is rendered once, by its attributes (special tokens as their text, NORMAL ones by the
model's :meth:`~bpetok.models.TokenizerModel.normal_piece`, BYTE ones as their byte), and kept;
decoding joins pieces and applies llama.cpp's space rules. :func:`check_byte_tokens` is the
load-time check llama.cpp makes by rendering every piece while it loads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from itertools import compress
from typing import TYPE_CHECKING, SupportsIndex

from bpetok._args import as_int, check_flag, check_not_text
from bpetok.errors import BpetokError, VocabularyError
from bpetok.specials import HIDDEN_WITHOUT_SPECIAL, SPECIAL
from bpetok.utf8 import BeyondUnicode
from bpetok.vocab import TokenAttr, Vocabulary

if TYPE_CHECKING:
    from bpetok.decode_stream import DecodeStream
    from bpetok.models import TokenizerModel

__all__ = ["Decoding", "check_byte_tokens", "clean_spaces", "token_to_byte"]


class Decoding:
    """:meth:`piece`, :meth:`token_bytes`, :meth:`decode`, :meth:`decode_bytes` and
    :meth:`decode_stream` over the attributes the Tokenizer sets."""

    vocabulary: Vocabulary
    model: TokenizerModel
    add_space_prefix: bool
    clean_spaces: bool
    _pieces: dict[int, bytes]  # id -> rendered bytes: bounded by the vocabulary

    def _check_id(self, token_id: SupportsIndex) -> int:
        """``token_id`` as an int in range; TypeError for a non-integer (or bool), BpetokError out of range."""
        token_id = as_int(token_id, "a token id")
        n_tokens = self.vocabulary.n_tokens
        if not 0 <= token_id < n_tokens:
            raise BpetokError(f"token id {token_id!r} is out of range: this vocabulary has ids 0..{n_tokens - 1}")
        return token_id

    def piece(self, token_id: SupportsIndex) -> bytes:
        """llama.cpp's ``token_to_piece(id, special=True)``: control tokens render as their text.

        ``token_id`` is anything :func:`operator.index` accepts (``int``, ``numpy.int64``), not a bool.
        """
        key = token_id if token_id.__class__ is int else as_int(token_id, "a token id")
        piece = self._pieces.get(key)
        if piece is None:
            key = self._check_id(key)
            piece = self._pieces[key] = self._render(key)
        return piece

    def token_bytes(self, token_id: SupportsIndex) -> bytes:
        """llama.cpp's ``token_to_piece(id, special=False)``: control and unknown tokens give ``b""``."""
        token_id = self._check_id(token_id)
        if self.vocabulary.attrs[token_id] & HIDDEN_WITHOUT_SPECIAL:
            return b""
        return self.piece(token_id)

    def _render(self, token_id: int) -> bytes:
        attr = self.vocabulary.attrs[token_id]
        text = self.vocabulary.tokens[token_id]
        own = self.model.render_piece(token_id, text, attr)
        if own is not None:  # a model whose pieces follow rules of their own (rwkv, plamo2)
            return own
        if attr & SPECIAL:
            return text  # raw text, no byte decoding
        if attr & TokenAttr.NORMAL:
            try:
                return self.model.normal_piece(text)
            except BeyondUnicode as e:
                raise VocabularyError(
                    f"{self.vocabulary.path}: token {token_id} {text!r} holds bytes {text[e.start:e.start + 4].hex(' ')} "
                    f"that decode to U+{e.cpt:X}, past U+10FFFF; llama.cpp refuses to load this vocabulary "
                    "(llama_decode_text throws): fix the token's text in 'tokenizer.ggml.tokens'"
                ) from None
        if attr & TokenAttr.BYTE:
            return bytes((token_to_byte(text) or 0,))  # never None: length checked at load (check_byte_tokens)
        return b""

    def decode_bytes(self, ids: Iterable[SupportsIndex], *, skip_special: bool = False) -> bytes:
        """The bytes of ``ids`` as llama.cpp's detokenizer gives them: specials rendered, or with
        ``skip_special`` control and unknown tokens left out (``token_to_piece(special=False)``).

        ``ids``: an iterable of token ids (ints, numpy integers, a numpy array); a str or bytes is
        refused rather than read as character codes.
        """
        check_not_text(ids, "decode()", "a sequence of token ids")
        try:
            ids = iter(ids)
        except TypeError:
            raise TypeError(f"decode() takes a sequence of token ids, not {type(ids).__name__}") from None
        skip_special = check_flag(skip_special, "decode(skip_special=...)")
        piece = self.token_bytes if skip_special else self.piece
        pieces = [piece(i) for i in ids]
        data = b"".join(pieces)
        # llama.cpp drops one leading space of the first piece where the model adds a space
        # prefix (even after a BOS, which it keeps: its remove_special is false here).
        if self.add_space_prefix and pieces and pieces[0][:1] == b" ":
            data = data[1:]
        if self.clean_spaces:
            data = clean_spaces(data)
        return data

    def decode(self, ids: Iterable[SupportsIndex], *, skip_special: bool = False) -> str:
        """The text of ``ids``: :meth:`decode_bytes`, decoded as UTF-8 with replacement characters."""
        return self.decode_bytes(ids, skip_special=skip_special).decode("utf-8", "replace")

    def decode_stream(self, *, skip_special: bool = False) -> DecodeStream:
        """A :class:`~bpetok.decode_stream.DecodeStream`: ids in one at a time, complete text out."""
        from bpetok.decode_stream import DecodeStream

        return DecodeStream(self, skip_special=skip_special)  # type: ignore[arg-type]  # self is a Tokenizer


def check_byte_tokens(vocabulary: Vocabulary) -> None:
    """Refuse a BYTE token too short to name its byte, at load time as llama.cpp does.

    llama.cpp renders every token's piece while loading; ``token_to_byte`` on such a token
    throws there, so the file never loads. The test mirrors :meth:`Decoding._render`'s order:
    special and NORMAL attributes win over BYTE.
    """

    def rendered_as_byte(attr) -> bool:
        return bool(attr & TokenAttr.BYTE) and not attr & (SPECIAL | TokenAttr.NORMAL)

    tokens = vocabulary.tokens
    for token_id in _ids_whose_attr(vocabulary.attrs, rendered_as_byte):
        if token_to_byte(tokens[token_id]) is None:
            raise VocabularyError(
                f"{vocabulary.path}: token {token_id} {tokens[token_id]!r} has type BYTE but is too short "
                "to name a byte (<0xXX>); llama.cpp refuses to load it too: fix its type in "
                "'tokenizer.ggml.token_type'"
            )


def _ids_whose_attr(attrs: list[int], wanted) -> Iterator[int]:
    """The token ids whose attribute passes ``wanted(attr)``, in id order.

    Only the few distinct attribute values are tested; tokens are then picked by set
    membership in C: ``attr & flag`` on 151k TokenAttr members goes through enum.Flag.__and__ (~0.1 s).
    """
    values = {a for a in set(attrs) if wanted(a)}
    return compress(range(len(attrs)), map(values.__contains__, attrs))


_STRTOL16 = re.compile(rb"[ \t\n\v\f\r]*([+-]?)([0-9A-Fa-f]*)")


def token_to_byte(text: bytes) -> int | None:
    """llama.cpp's token_to_byte: ``(char) strtol(text.substr(3, 2), NULL, 16)``; None where substr throws.

    >>> token_to_byte(b"<0x41>"), token_to_byte(b"<mask>"), token_to_byte(b"<0x"), token_to_byte(b"ab")
    (65, 0, 0, None)
    """
    if len(text) < 3:
        return None
    sign, digits = _STRTOL16.match(text[3:5]).groups()  # type: ignore[union-attr]  # the pattern matches ""
    value = int(digits or b"0", 16)
    return (-value if sign == b"-" else value) & 0xFF


_CLEAN_1 = re.compile(rb" ([?!.,])")
_CLEAN_2 = re.compile(rb" ' ")
_CLEAN_3 = re.compile(rb" '(?=[sm]|re|ve)")


def clean_spaces(data: bytes) -> bytes:
    """llama.cpp's detokenizer cleanup (clean_spaces), three passes in its order."""
    data = _CLEAN_1.sub(rb"\1", data)
    data = _CLEAN_2.sub(b"'", data)
    return _CLEAN_3.sub(b"'", data)
