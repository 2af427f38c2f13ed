"""The gpt2 model over raw UTF-8: llama.cpp's BPE session with ``byte_encode = false``.

For five ``tokenizer.ggml.pre`` names of a ``gpt2`` vocabulary llama.cpp does not map bytes to
GPT-2's alphabet (src/llama-vocab.cpp, ``llm_tokenizer_bpe`` and ``llm_tokenizer_bpe_session``):
``gemma4`` and ``granite-embed-multi-311m`` (type GEMMA4), ``sarvam-moe``, ``mmbert`` and
``whitespace``. The pre-tokenizer spec says which, and how, through its flags
(:class:`~bpetok.pretok.PreTokenizerSpec`): ``byte_encode=False`` brings a vocabulary here,
``escape_whitespaces``, ``newline_runs_whole`` and ``metaspace_words`` choose the steps. Per
fragment of text between special tokens:

1. spaces become ``▁`` (``escape_whitespaces``; llama.cpp does it on the raw bytes, before it
   decodes them, so an overlong encoding of a space stays a space);
2. the spec's pre-tokenizer splits the text; with ``metaspace_words`` every piece that is not
   newlines only gets a leading ``▁`` and is cut again before each further ``▁``;
3. each piece is merged as the gemma4 model merges (:class:`~bpetok.models.gemma4.RawBytePairModel`,
   its C loop or its Python twin): characters are symbols, merge rank decides, a symbol that is no
   token falls back to ``<0xXX>`` tokens; with ``newline_runs_whole`` a newline run that is a token
   is taken whole.

A piece of more than one character that holds a space has no ids: llama.cpp's ``find_bpe_rank``
asserts that no symbol holds a space and aborts the process (with ``whitespace``: any run of
whitespace with a space in it, ``"a  b"``; with ``▁`` escaping: an overlong space). Such input is
refused with an :class:`~bpetok.errors.InputError`.

The escaping comes before the split, so byte-level BPE's space chunks, which see the text, do not
apply: this model splits each fragment itself and caches ids by piece.
"""

from __future__ import annotations

from bpetok.errors import InputError
from bpetok.models.gemma4 import RawBytePairModel
from bpetok.models.gpt2 import decode_token_text
from bpetok.models.llama import SPACE
from bpetok.utf8 import decode_llama_utf8

__all__ = ["RawUtf8Model", "metaspace_words"]

_SPACE_BYTES = SPACE.encode()


def metaspace_words(pieces: list[str]) -> list[str]:
    """llama.cpp's mmbert words: each piece not of newlines only starts with ``▁`` and is cut before
    every further ``▁``.

    >>> metaspace_words(["a▁b", "\\n\\n", "▁▁c"])
    ['▁a', '▁b', '\\n\\n', '▁', '▁c']
    """
    words: list[str] = []
    for piece in pieces:
        if not piece.strip("\n"):
            words.append(piece)
            continue
        if not piece.startswith(SPACE):
            piece = SPACE + piece
        parts = piece.split(SPACE)  # parts[0] is "": the piece starts with ▁
        words += [SPACE + part for part in parts[1:]]
    return words


class RawUtf8Model(RawBytePairModel):
    """A gpt2 vocabulary's BPE over raw UTF-8, as its pre-tokenizer spec's flags say (module docstring)."""

    def __init__(self, vocabulary, pretokenizer):
        super().__init__(vocabulary)
        self.splitter = pretokenizer.factory()
        self.escape_whitespaces = pretokenizer.escape_whitespaces
        self.newline_runs_whole = pretokenizer.newline_runs_whole
        self.metaspace = pretokenizer.metaspace_words
        self.pre = vocabulary.pre

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        """Ids of one fragment of text between special tokens."""
        return self._encode_text(self._escape(text))

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` the plain way: no cache, each piece by :func:`merge_symbols`."""
        return self._encode_text(self._escape(text), reference=True)

    def encode_fragment_bytes(self, data: bytes, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` of raw bytes: spaces escaped first, then the bytes decoded as
        llama.cpp decodes them (U+FFFD for a byte that starts no sequence, overlongs decoded)."""
        if self.escape_whitespaces:
            data = data.replace(b" ", _SPACE_BYTES)
        return self._encode_text(decode_llama_utf8(data), data)

    def _escape(self, text: str) -> str:
        return text.replace(" ", SPACE) if self.escape_whitespaces else text

    def _encode_text(self, text: str, data: bytes | None = None, reference: bool = False) -> list[int]:
        pieces = self.splitter.split(text)
        if self.metaspace:
            pieces = metaspace_words(pieces)
        ids: list[int] = []
        cache = self._cache
        for piece in pieces:
            if " " in piece and len(piece) > 1:
                shown = repr(data) if data is not None else repr(text)
                raise InputError(
                    f"input {shown[:200]} has the piece {piece[:40]!r}, a space next to other characters; "
                    f"llama.cpp aborts on it with tokenizer.ggml.pre={self.pre!r} (GGML_ASSERT in "
                    "find_bpe_rank: no BPE symbol may hold a space), so it has no token ids: "
                    "replace the space or the characters next to it"
                )
            key = piece.encode("utf-8", "surrogatepass")
            if reference:
                ids += self.encode_piece_reference(key)
                continue
            found = cache.get(key)
            if found is None:
                found = self.encode_piece(key)
                cache.keep(key, found)
            ids += found
        return ids

    def normal_piece(self, text: bytes) -> bytes:
        """A NORMAL token's bytes: ``▁`` back to spaces where the spec escapes them, else the text
        read through GPT-2's alphabet (llama.cpp's ``llama_decode_text``, markers included)."""
        if self.escape_whitespaces:
            return text.replace(_SPACE_BYTES, b" ")
        return decode_token_text(text)
