"""HF tokenizers' ``Precompiled`` normalizer: SentencePiece's character map, applied HF's way.

The map is the blob llama.cpp reads as ``tokenizer.ggml.precompiled_charsmap`` (read here with
:class:`bpetok.models.charsmap.CharsMap`, every bound checked). SentencePiece (and llama.cpp)
replace the longest key at each position; HF (the ``spm_precompiled`` crate) goes by grapheme
cluster instead: a cluster shorter than 6 bytes whose bytes start with a key is replaced whole
by the SHORTEST such key's replacement (``Ａ`` + U+0301 becomes ``A``: the accent goes); any
other cluster is replaced character by character. Clusters are the ``regex`` package's ``\\X``.
"""

from __future__ import annotations

import base64
import binascii

from bpetok import VocabularyError
from bpetok.models.charsmap import CharsMap

__all__ = ["Precompiled", "read_precompiled"]


def _base(packed: int) -> int:
    return (packed >> 10) << ((packed & (1 << 9)) >> 6)


class Precompiled:
    """``precompiled(text)`` is HF's normalized text."""

    def __init__(self, blob: bytes, where: str):
        import regex

        self.blob = blob
        self.charsmap = CharsMap(blob, where)
        self.where = where
        # Every single character the map has as a key (the common case, one str.translate).
        self.table = {ord(c): self._shortest(c) for c in self._single_keys()}
        self.table = {k: v for k, v in self.table.items() if v is not None}
        self._clusters = regex.compile(r"\X").findall

    def _single_keys(self) -> list[str]:
        fast = self.charsmap._fast
        if fast is None:
            raise VocabularyError(f"{self.where}: a charsmap whose keys end inside a character or whose replacements "
                                  "are not UTF-8; bpetok-hf does not read it (HF's Precompiled works on characters)")
        return [chr(cp) for cp in fast[0]]

    def _shortest(self, text: str) -> str | None:
        """The replacement of the shortest key ``text``'s bytes start with (HF's ``transform``), or None."""
        cm = self.charsmap
        if not cm.nodes:
            return None
        state = _base(cm._node(0))
        for c in text.encode("utf-8", "surrogatepass"):
            if c == 0:
                return None
            state ^= c
            packed = cm._node(state)
            if packed & 0x800000FF != c:
                return None
            state ^= _base(packed)
            if packed >> 8 & 1:
                replacement = cm._string(cm._node(state) & 0x7FFFFFFF)
                try:
                    return replacement.decode()
                except UnicodeDecodeError:
                    return None
        return None

    def __call__(self, text: str) -> str:
        table = self.table
        if text.isascii() and "\r\n" not in text:
            return text.translate(table)
        out = []
        for cluster in self._clusters(text):
            if len(cluster) > 1 and len(cluster.encode("utf-8", "surrogatepass")) < 6:
                found = self._shortest(cluster)
                if found is not None:
                    out.append(found)
                    continue
            out.append(cluster.translate(table))
        return "".join(out)


def read_precompiled(node: dict, path: str, where: str) -> Precompiled:
    """The Precompiled step of a tokenizer.json's normalizer (its map base64 in ``precompiled_charsmap``)."""
    value = node.get("precompiled_charsmap")
    if not isinstance(value, str):
        from bpetok_hf.schema import bad

        raise bad(path, f"{where}.precompiled_charsmap", value, "a base64 string")
    try:
        blob = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise VocabularyError(f"{path}: {where}.precompiled_charsmap is not base64 ({e}); the file is damaged: "
                              "re-download or re-export it") from None
    if not blob:
        raise VocabularyError(f"{path}: {where}.precompiled_charsmap is empty; Hugging Face tokenizers cannot parse "
                              "it either: re-download or re-export the file")
    return Precompiled(blob, f"{path}: {where}.precompiled_charsmap")
