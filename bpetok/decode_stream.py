"""Incremental decoding: token ids arrive one at a time, text leaves once its bytes are final.

A token's bytes can end inside a UTF-8 sequence (byte tokens, or BPE tokens that split a
character), so :class:`DecodeStream` holds back an incomplete tail until the next ids complete it.
The text of every :meth:`DecodeStream.step` plus the final :meth:`DecodeStream.flush` is exactly
``Tokenizer.decode(ids)``: the same bytes, decoded by the same UTF-8 decoder with the same
replacement of invalid bytes (Python's incremental decoder replaces exactly as a one-shot decode).

Vocabularies whose pre-tokenizer keeps llama.cpp's ``clean_spaces`` also rewrite the bytes across
token boundaries (`` ?`` -> ``?``, `` ' `` -> ``'``, `` 's`` -> ``'s``...), so the stream also holds
back a tail that one of those rewrites could still reach.
"""

from __future__ import annotations

import codecs
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bpetok.tokenizer import Tokenizer

__all__ = ["DecodeStream"]

_SPACE, _QUOTE = 0x20, 0x27


def open_tail(data: bytes) -> int:
    """How many bytes at the end of ``data`` a clean_spaces rewrite could still join to what follows.

    Every rewrite (:func:`bpetok.decode.clean_spaces`) matches a short run of ``' '``, ``'``,
    ``?!.,`` and the letters of ``'s 'm 're 've``, starting at a space. A run can continue past the
    end only from a space, a quote, or the ``r``/``v`` of ``'r``/``'v`` (which wait for an ``e``);
    a punctuation mark, ``s``, ``m`` or ``e`` always ends a run, and any other byte is in none.
    So the tail to keep starts after the last byte that cannot continue a run.

    >>> open_tail(b"don't"), open_tail(b"say '"), open_tail(b"we'r"), open_tail(b"a  "), open_tail(b"ok.")
    (0, 2, 2, 2, 0)
    """
    n = len(data)
    i = n
    while i > 0:
        b = data[i - 1]
        if b in (_SPACE, _QUOTE) or (b in b"rv" and i >= 2 and data[i - 2] == _QUOTE):
            i -= 1
        else:
            break
    return n - i


class DecodeStream:
    """Decode ids one at a time; see the module docstring.

    >>> stream = tok.decode_stream()
    >>> [stream.step(i) for i in tok.encode("héllo")] + [stream.flush()]
    ['h', 'él', 'lo', '']
    """

    def __init__(self, tokenizer: Tokenizer, *, skip_special: bool = False):
        from bpetok._args import check_flag

        self.tokenizer = tokenizer
        self.skip_special = skip_special = check_flag(skip_special, "decode_stream(skip_special=...)")
        # token_bytes hides control and unknown tokens, as decode(skip_special=True) does
        self._bytes_of = tokenizer.token_bytes if skip_special else tokenizer.piece
        self._clean_spaces = tokenizer.clean_spaces
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._held = b""  # bytes a clean_spaces rewrite may still change
        # Where the model adds a space prefix, decode drops the first piece's leading space.
        self._first = tokenizer.add_space_prefix

    def step(self, token_id: int) -> str:
        """Take one id; return the text that became complete (often ``""``)."""
        data = self._bytes_of(token_id)
        if self._first:
            self._first = False
            if data[:1] == b" ":
                data = data[1:]
        if not self._clean_spaces:
            return self._decoder.decode(data)
        from bpetok.decode import clean_spaces as _clean_spaces

        data = self._held + data
        keep = open_tail(data)
        ready, self._held = (data[:-keep], data[-keep:]) if keep else (data, b"")
        return self._decoder.decode(_clean_spaces(ready)) if ready else ""

    def feed(self, ids) -> str:
        """:meth:`step` over several ids, their texts joined."""
        return "".join([self.step(i) for i in ids])

    def flush(self) -> str:
        """End of the ids: return what was held back (an incomplete sequence becomes U+FFFD) and reset."""
        from bpetok.decode import clean_spaces as _clean_spaces

        tail = _clean_spaces(self._held) if self._held else b""
        self._held = b""
        text = self._decoder.decode(tail, final=True)
        self._decoder.reset()
        self._first = self.tokenizer.add_space_prefix
        return text
