"""UTF-8 as llama.cpp reads it (src/unicode.cpp: ``unicode_cpt_from_utf8``, ``unicode_cpts_from_utf8``).

A lead byte followed by its continuation bytes is decoded, even where UTF-8 forbids it: overlongs
(``c0 bc`` is "<") and encoded surrogates (``ed a0 80`` is U+D800). Any other byte is U+FFFD, one
byte at a time (``e4 b8 61`` is U+FFFD U+FFFD "a"). A sequence that decodes past U+10FFFF
(``f4 90 80 80`` up to ``f7 bf bf bf``) has no way back to UTF-8: llama.cpp's ``unicode_cpt_to_utf8``
throws on it, so tokenizing such text aborts, and a vocabulary with such a token fails to load
(``llama_decode_text``). Here it raises :class:`BeyondUnicode`, which the caller turns into a
typed error naming the input or the token.

Python's strict decoder and llama.cpp's agree on well-formed UTF-8, so only where Python stops
does llama.cpp's rule run (a codec error handler); the rest is decoded in C.
"""

from __future__ import annotations

import codecs

__all__ = ["decode_llama_utf8", "BeyondUnicode", "LLAMA_UTF8_ERRORS"]


class BeyondUnicode(Exception):
    """A sequence decodes past U+10FFFF, at byte ``start`` of the decoded bytes, to ``cpt``."""

    def __init__(self, start: int, cpt: int):
        super().__init__(start, cpt)
        self.start, self.cpt = start, cpt


def _cpt_at(data: bytes, i: int) -> tuple[int, int]:
    """llama.cpp's ``unicode_cpt_from_utf8`` at ``data[i]``: (code point, bytes used); (U+FFFD, 1)
    where it throws (``unicode_cpts_from_utf8`` then tries the next byte on its own).

    >>> _cpt_at(b"\\xc0\\xbc", 0), _cpt_at(b"\\xe4\\xb8a", 0), _cpt_at(b"\\xf4\\x90\\x80\\x80", 0)
    ((60, 2), (65533, 1), (1114112, 4))
    """
    b = data[i]
    length = 1 if b < 0x80 else 2 if 0xC0 <= b < 0xE0 else 3 if 0xE0 <= b < 0xF0 else 4 if 0xF0 <= b < 0xF8 else 0
    if length == 1:
        return b, 1
    tail = data[i + 1 : i + length]
    if not length or len(tail) != length - 1 or not all(0x80 <= c < 0xC0 for c in tail):
        return 0xFFFD, 1
    cpt = b & (0x7F >> length)
    for c in tail:
        cpt = (cpt << 6) | (c & 0x3F)
    return cpt, length


def _llama_utf8_errors(error: UnicodeError) -> tuple[str, int]:
    """Codec error handler: where Python's strict decoder stops, llama.cpp's next step."""
    if not isinstance(error, UnicodeDecodeError):  # registered for decoding only
        raise error
    cpt, length = _cpt_at(error.object, error.start)
    if cpt > 0x10FFFF:
        raise BeyondUnicode(error.start, cpt)
    return chr(cpt), error.start + length


LLAMA_UTF8_ERRORS = "bpetok-llama-utf8"
codecs.register_error(LLAMA_UTF8_ERRORS, _llama_utf8_errors)


def decode_llama_utf8(data: bytes) -> str:
    """``data`` as llama.cpp's ``unicode_cpts_from_utf8`` reads it: U+FFFD for a byte that starts
    no sequence, overlongs and surrogates decoded; :class:`BeyondUnicode` past U+10FFFF.

    >>> decode_llama_utf8(b"a\\xff\\xc0\\xbc\\xed\\xa0\\x80")
    'a\\ufffd<\\ud800'
    """
    return data.decode("utf-8", LLAMA_UTF8_ERRORS)
